"""Issue 37: a lost worker with no replacement to be had leaves the run on the nodes it has, down to
--min-nodes; below that the run waits for capacity; a shrunk run asks for its nodes back. The provider and
SSH work is replaced by what it would have done."""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from xeoncluster.agent import regrowth, restart, shrink
from xeoncluster.agent.attempt import Outcome
from xeoncluster.agent.regrowth import Regrowth, free_indices
from xeoncluster.agent.restart import Recovery
from xeoncluster.agent.shrink import ShrinkRule
from xeoncluster.core.errors import ProviderError, TrainingError
from xeoncluster.node.events.events import EXIT_STOPPED
from xeoncluster.providers.base import Node
from xeoncluster.runs.record import Growth, Restart, RunRecord, RunState

NODES = [Node("node0", "i-0", "10.0.0.2", "10.0.0.2", "master", "spot"),
         Node("node1", "i-1", "10.0.0.3", "10.0.0.3", "worker", "spot"),
         Node("node2", "i-2", "10.0.0.4", "10.0.0.4", "worker", "spot")]
NO_CAPACITY = TrainingError("lost node2 and could not replace it: no capacity in us-east-1a; the checkpoints are kept")


@dataclass
class Cluster:
    nodes: list[Node] = field(default_factory=lambda: list(NODES))
    ready: bool = True
    config: dict[str, Any] = field(default_factory=lambda: {"nodes": 3})

    def node_list(self) -> list[Node]:
        return self.nodes

    @property
    def master(self) -> Node | None:
        return next((n for n in self.nodes if n.is_master), None)

    def set_nodes(self, nodes: list[Node]) -> None:
        self.nodes = nodes


@dataclass
class Seen:
    shrunk: list[list[str]] = field(default_factory=list)
    launches: int = 0
    fail_launches: int = 0
    rejoined: int = 0


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Seen:
    done = Seen()

    def no_replacement(*_: Any) -> None:
        raise NO_CAPACITY

    def shrunk(_ctx: Any, record: Cluster, _shell: Any, lost: list[Node], _run_dir: str) -> int:
        done.shrunk.append([n.name for n in lost])
        record.set_nodes([n for n in record.nodes if n not in lost])
        return 40

    def launch(_ctx: Any, record: Cluster, _shell: Any) -> list[Node]:
        done.launches += 1
        if done.launches <= done.fail_launches:
            raise ProviderError("no capacity in us-east-1a")
        record.set_nodes(list(NODES))
        return [NODES[2]]

    def rejoined(*_: Any) -> int:
        done.rejoined += 1
        return 40

    monkeypatch.setattr(restart, "replace_lost", no_replacement)
    monkeypatch.setattr(restart, "shrink", shrunk)
    monkeypatch.setattr(restart, "launch_missing", launch)
    monkeypatch.setattr(restart, "rejoin", rejoined)
    monkeypatch.setattr(restart, "last_step", lambda *_: 40)
    monkeypatch.setattr(restart, "lost_nodes", lambda *_: [(NODES[2], "spot interruption notice")])
    return done


def recovery(cluster: Cluster, min_nodes: int = 1, cancelled: Any = lambda _s: False) -> Recovery:
    warned: list[str] = []
    ctx = SimpleNamespace(state=SimpleNamespace(load=lambda: cluster),
                          reporter=SimpleNamespace(warn=warned.append, step=None, detail=lambda _: None))
    plan = SimpleNamespace(run="r1", home="/home/ubuntu", nodes=tuple(NODES))
    shell = SimpleNamespace(close=lambda: None)
    return Recovery(ctx, shell, plan, 45, {}, {}, ShrinkRule(min_nodes), cancelled)  # type: ignore[arg-type]


def test_a_worker_with_no_replacement_leaves_the_run_on_the_nodes_it_has(seen: Seen) -> None:
    cluster = Cluster()
    done = recovery(cluster).run(Outcome(EXIT_STOPPED))
    assert done is not None and done.nodes_after == 2 and done.from_step == 40 and done.replacement == ""
    assert seen.shrunk == [["node2"]] and [n.name for n in cluster.nodes] == ["node0", "node1"]
    assert "no replacement to be had: training on with 2 node(s)" in done.describe()


def test_below_min_nodes_the_run_waits_until_capacity_returns(seen: Seen) -> None:
    seen.fail_launches = 2
    waited: list[float] = []
    done = recovery(Cluster(), min_nodes=3, cancelled=lambda s: bool(waited.append(s))).run(Outcome(EXIT_STOPPED))
    assert done is not None and done.nodes_after is None and done.from_step == 40
    assert seen.launches == 3 and seen.rejoined == 1 and waited == [20.0, 40.0, 80.0]


def test_a_run_cancelled_while_it_waits_for_capacity_says_so(seen: Seen) -> None:
    seen.fail_launches = 99
    with pytest.raises(TrainingError, match="cancelled while waiting for capacity"):
        recovery(Cluster(), min_nodes=3, cancelled=lambda _s: True).run(Outcome(EXIT_STOPPED))


def test_a_lost_master_is_not_shrunk_away(seen: Seen, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restart, "lost_nodes", lambda *_: [(NODES[0], "gone")])
    with pytest.raises(TrainingError, match="could not replace it"):
        recovery(Cluster()).run(Outcome(1))
    assert seen.shrunk == []


def test_missing_nodes_take_the_lowest_free_names() -> None:
    cluster = Cluster(nodes=[NODES[0], NODES[2]], config={"nodes": 4})
    assert free_indices(cluster, 2) == [1, 3]  # type: ignore[arg-type]


def test_regrowth_asks_again_until_a_node_comes_then_says_it_is_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    tries: list[int] = []

    def launch(*_: Any) -> list[Node]:
        tries.append(1)
        if len(tries) < 3:
            raise ProviderError("no capacity")
        return [NODES[2]]

    monkeypatch.setattr(regrowth, "launch_missing", launch)
    ready = threading.Event()
    got: list[list[Node]] = []
    ctx = SimpleNamespace(state=SimpleNamespace(load=lambda: SimpleNamespace(ready=True, name="c1", nodes=[],
                                                                             config={"nodes": 3})),
                          reporter=SimpleNamespace(warn=lambda _: None, step=lambda _: contextlib.nullcontext()),
                          shell=lambda: SimpleNamespace(close=lambda: None))
    growth = Regrowth(ctx, lambda _n: None, lambda nodes: (got.append(nodes), ready.set()), first_wait=0.01)  # type: ignore[arg-type]
    growth.start()
    assert ready.wait(5) and growth.ready and got == [[NODES[2]]] and len(tries) == 3


def test_a_shrunk_run_says_so_until_it_grows_back() -> None:
    record = RunRecord(run="r1", cluster="c1", task="squad", state=RunState.RUNNING, nodes=["node0", "node1"], size=3)
    assert record.shrunk == "2/3 nodes"
    assert RunRecord(run="r1", cluster="c1", task="squad", state=RunState.RUNNING, nodes=["node0"], size=1).shrunk == ""
    growth = Growth(nodes="node2", to_nodes=3, from_step=120, seconds=14.2)
    assert growth.describe() == ("grew back: node2 joined; training on 3 node(s), resuming from checkpoint-120; "
                                 "the change took 14s")
    assert Restart(node="node2", reason="r", from_step=None, seconds=1, lost_steps=0).nodes_after is None


def test_backoff_doubles_to_its_ceiling() -> None:
    wait = shrink.backoff(20, 100)
    assert [wait() for _ in range(5)] == [20, 40, 80, 100, 100]


def test_a_swap_takes_the_cluster_as_it_is_once_the_replacement_is_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """A notice shorter than a boot: the ranks stop first, and the recovery waits for the replacement, whose
    launch records it in the cluster's state. The swap must start from that state: from the one read before,
    it wrote a hostfile without the replacement, and the relaunch ran both ranks on the master."""
    new = Node("node3", "i-3", "10.0.0.5", "10.0.0.5", "worker", "spot")
    stored = [NODES[0], NODES[1]]
    swapped: list[list[str]] = []

    class Booting:
        old = NODES[1]

        def wait(self) -> Node:
            stored.append(new)  # what add_nodes saves as the replacement comes up
            return new

    def swap(_ctx: Any, record: Cluster, _shell: Any, old: Node, _new: Node, _run_dir: str, _remove: Any) -> int:
        record.set_nodes([n for n in record.nodes if n.name != old.name])
        swapped.append([n.name for n in record.nodes])
        return 40

    monkeypatch.setattr(restart, "swap_in", swap)
    monkeypatch.setattr(restart, "last_step", lambda *_: 40)
    monkeypatch.setattr(restart, "lost_nodes", lambda *_: [(NODES[1], "spot interruption notice")])
    ctx = SimpleNamespace(state=SimpleNamespace(load=lambda: Cluster(nodes=list(stored))),
                          reporter=SimpleNamespace(warn=lambda _: None, step=None, detail=lambda _: None))
    plan = SimpleNamespace(run="r1", home="/home/ubuntu", nodes=tuple(stored))
    done = Recovery(ctx, SimpleNamespace(close=lambda: None), plan, 45, {}, {"10.0.0.3": Booting()},  # type: ignore[arg-type]
                    ).run(Outcome(EXIT_STOPPED))
    assert done is not None and done.replacement == "node3"
    assert swapped == [["node0", "node3"]]
