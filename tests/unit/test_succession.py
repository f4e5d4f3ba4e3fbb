"""Issue 36: what the master's watch agent keeps for a takeover (agent/succession.py, agent/replica.py):
the master lease renewed in its name, a master whose lease another node took stops, and the copy each
worker gets holds the cluster's state and only the runs that are not over."""
from __future__ import annotations

from pathlib import Path

import pytest

from xeoncluster.agent.replica import replica_files
from xeoncluster.agent.succession import Fenced, Succession
from xeoncluster.cluster.master_lease import LeaseBook
from xeoncluster.cluster.state import StateDir
from xeoncluster.providers.node_kinds import Node, Role
from xeoncluster.runs.record import RunRecord, RunState
from xeoncluster.storage.base import StorageLocation
from xeoncluster.storage.folder import FolderStorage


def node(name: str, role: Role, instance: str) -> Node:
    return Node(name=name, id=instance, private_ip="10.0.0.1", ssh_host="10.0.0.1", role=role, market="spot")


class NoCopy:
    def __init__(self) -> None:
        self.to: list[list[str]] = []

    def copy(self, workers: list[Node]) -> list[str]:
        self.to.append([n.name for n in workers])
        return []


def book(tmp_path: Path) -> LeaseBook:
    return LeaseBook(FolderStorage(StorageLocation(url=str(tmp_path), folder=str(tmp_path))), "c1")


def test_the_master_keeps_the_lease_and_copies_to_the_workers_it_reached(tmp_path: Path) -> None:
    copies = NoCopy()
    nodes = [node("node0", Role.MASTER, "i-0000000a"), node("node1", Role.WORKER, "i-0000000b"),
             node("node2", Role.WORKER, "i-0000000c")]
    keeper = Succession(copies, book(tmp_path))  # type: ignore[arg-type]
    keeper.keep(nodes, {"node0", "node1"}, 100.0)
    keeper.keep(nodes, {"node0", "node1", "node2"}, 160.0)
    lease = book(tmp_path).current()
    assert lease is not None and (lease.holder, lease.epoch, lease.renewed_at) == ("i-0000000a", 1, 160.0)
    assert copies.to == [["node1"], ["node1", "node2"]]


def test_a_master_whose_lease_another_node_took_is_fenced(tmp_path: Path) -> None:
    taken = book(tmp_path).take("i-0000000b", "node0", 100.0, 180.0)
    assert taken is not None
    copies = NoCopy()
    with pytest.raises(Fenced, match="node0 holds the master lease"):
        Succession(copies, book(tmp_path)).keep(  # type: ignore[arg-type]
            [node("node0", Role.MASTER, "i-0000000a"), node("node1", Role.WORKER, "i-0000000c")], {"node1"}, 120.0)
    assert copies.to == []  # a fenced master copies nothing


def test_the_copy_holds_the_state_and_the_runs_that_are_not_over(tmp_path: Path) -> None:
    state = StateDir("c1", tmp_path)
    state.create()
    for name, text in (("state.json", "{}"), ("known_hosts", "k"), ("id_ed25519", "key"), ("autostop.json", "{}")):
        (state.path / name).write_text(text)
    for run, run_state in (("live", RunState.RUNNING), ("queued", RunState.QUEUED), ("done", RunState.SUCCEEDED)):
        folder = state.runs / run
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(RunRecord(run=run, cluster="c1", task="squad", state=run_state)
                                         .model_dump_json())
        (folder / "request.json").write_text("{}")
        (folder / "train.log").write_text("a long log")
    files = {f.path: f for f in replica_files(state)}
    base = "xeoncluster/agent/clusters/c1"
    assert set(files) == {f"{base}/{n}" for n in ("state.json", "known_hosts", "id_ed25519", "autostop.json")} | {
        f"{base}/runs/{run}/{n}" for run in ("live", "queued") for n in ("run.json", "request.json")}
    assert all(f.mode == 0o600 for f in files.values())


def test_the_steps_lost_count_from_the_last_step_the_events_reported() -> None:
    """The bench found a takeover reporting 0 steps lost at step 126 from checkpoint-120: the record the
    worker held was a beat old. The events so far say how far the run got."""
    from xeoncluster.agent.new_master import last_step
    from xeoncluster.node.events.events import StartedEvent, StepEvent

    text = "".join(e.to_json() + "\n" for e in (StartedEvent(step=0), StepEvent(step=120), StepEvent(step=126)))
    assert last_step(text + '{"cut short') == 126
    assert last_step("") == 0
