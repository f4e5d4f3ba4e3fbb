"""Interruptions are not failures (agent/run_recovery.py): a lost node is replaced within
--max-interruptions (default: no bound), and only the job's own failures (a stall) count against
--max-restarts. The recovery's provider and SSH work is replaced by what it would have found."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from xeoncluster.agent import current_run, restart, run_recovery
from xeoncluster.agent.attempt import Outcome
from xeoncluster.agent.current_run import CurrentRun
from xeoncluster.agent.record_keeper import RecordKeeper
from xeoncluster.agent.run_recovery import failure, recover
from xeoncluster.job.train_plan import resume_command
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.node.events.events import EXIT_STOPPED
from xeoncluster.providers.base import Node
from xeoncluster.runs.record import IN_PLACE, Restart, RestartKind, RunFiles, RunRecord

NODES = [Node("node0", "i-0", "10.0.0.2", "10.0.0.2", "master", "spot"),
         Node("node1", "i-1", "10.0.0.3", "10.0.0.3", "worker", "spot")]
STALL = "no step for 11 minutes"


@dataclass
class Cluster:
    ready: bool = True
    nodes: list[Node] = field(default_factory=lambda: list(NODES))

    def node_list(self) -> list[Node]:
        return self.nodes


@dataclass
class Found:
    """What the recovery would find: the nodes lost this time."""

    lost: list[tuple[Node, str]] = field(default_factory=list)


@pytest.fixture
def found(monkeypatch: pytest.MonkeyPatch) -> Found:
    seen = Found()
    monkeypatch.setattr(restart, "lost_nodes", lambda *_: list(seen.lost))
    monkeypatch.setattr(restart, "last_step", lambda *_: 40)
    monkeypatch.setattr(restart.Recovery, "_replace", lambda _, __, lost, ___: (40, [n.name for n, _ in lost]))
    monkeypatch.setattr(run_recovery, "restart_in_place", lambda *_: Restart(
        node=IN_PLACE, reason=f"stalled: {STALL}", from_step=40, seconds=1.0, lost_steps=0, kind=RestartKind.FAILURE))
    monkeypatch.setattr(current_run, "RunStorage", lambda *_: SimpleNamespace(where=""))
    return seen


def agent_run(tmp_path: Path, **asked: Any) -> CurrentRun:
    files = RunFiles(tmp_path / "r1")
    files.path.mkdir()
    record = RunRecord(run="r1", cluster="c1", task="squad")
    files.save(record)
    quiet = SimpleNamespace(warn=lambda _: None, step=None, detail=lambda _: None)
    ctx = SimpleNamespace(state=SimpleNamespace(load=Cluster), reporter=quiet,
                          provider=SimpleNamespace(nodes=lambda _: []), config=None)
    plan = SimpleNamespace(run="r1", home="/home/ubuntu", nodes=tuple(NODES))
    return CurrentRun(ctx, files, RecordKeeper(files, record), None, TaskRequest(task="squad", **asked),  # type: ignore[arg-type]
                      plan, None)  # type: ignore[arg-type]


def end_once(run: CurrentRun, outcome: Outcome) -> Restart | None:
    """One launch that ended without success, as the supervisor's loop takes it."""
    shell = SimpleNamespace(close=lambda: None)
    restarted = recover(run, shell, run.plan, outcome)  # type: ignore[arg-type]
    if restarted is not None:
        run.keeper.restarted(restarted)
    return restarted


def test_five_noticed_interruptions_keep_the_run_going_with_the_defaults(tmp_path: Path, found: Found) -> None:
    run = agent_run(tmp_path)
    for _ in range(5):
        found.lost = [(NODES[1], "spot interruption notice")]
        assert end_once(run, Outcome(EXIT_STOPPED)) is not None
    assert [r.kind for r in run.record.restarts] == [RestartKind.INTERRUPTION] * 5
    assert run.interruptions_left() and run.failure_restarts_left()


def test_a_stall_still_counts_against_max_restarts(tmp_path: Path, found: Found) -> None:
    run = agent_run(tmp_path, max_restarts=2)
    found.lost = [(NODES[1], "spot interruption notice")]
    assert end_once(run, Outcome(EXIT_STOPPED)) is not None
    found.lost = []
    for _ in range(2):
        run.stalled = STALL
        assert end_once(run, Outcome(1)) is not None
    run.stalled = STALL
    assert end_once(run, Outcome(1)) is None
    assert [r.kind for r in run.record.restarts] == [RestartKind.INTERRUPTION, RestartKind.FAILURE,
                                                     RestartKind.FAILURE]
    assert "(--max-restarts spent)" in failure(run, Outcome(1))


def test_spent_interruptions_end_the_run_naming_max_interruptions(tmp_path: Path, found: Found) -> None:
    run = agent_run(tmp_path, max_interruptions=2, max_restarts=0)
    found.lost = [(NODES[1], "spot interruption notice")]
    assert end_once(run, Outcome(EXIT_STOPPED)) is not None
    assert end_once(run, Outcome(EXIT_STOPPED)) is not None
    assert end_once(run, Outcome(EXIT_STOPPED)) is None
    line = failure(run, Outcome(EXIT_STOPPED))
    assert line.startswith("lost node1 (spot interruption notice) and did not replace it: --max-interruptions 2 spent")
    assert "--resume" in line


def test_a_job_failure_with_every_node_there_is_not_restarted(tmp_path: Path, found: Found) -> None:
    run = agent_run(tmp_path)
    assert end_once(run, Outcome(1)) is None
    assert run.record.restarts == []


def test_old_records_say_which_kind_each_restart_was() -> None:
    old = RunRecord.model_validate_json(json.dumps({
        "run": "r1", "cluster": "c1", "task": "squad", "stalls": 1, "restarts": [
            {"node": "node1", "reason": "spot interruption", "from_step": 10, "seconds": 9.0, "lost_steps": 0},
            {"node": IN_PLACE, "reason": f"stalled: {STALL}", "from_step": 20, "seconds": 2.0, "lost_steps": 3}]}))
    assert [r.kind for r in old.restarts] == [RestartKind.INTERRUPTION, RestartKind.FAILURE]
    assert (old.restarts_of(RestartKind.INTERRUPTION), old.restarts_of(RestartKind.FAILURE)) == (1, 1)


def test_the_resume_line_keeps_the_interruption_bound() -> None:
    line = resume_command(TaskRequest(task="squad", max_interruptions=7), "c1", "r1")
    assert "--max-interruptions 7" in line and "--max-restarts" not in line
    assert "--max-interruptions" not in resume_command(TaskRequest(task="squad"), "c1", "r1")
