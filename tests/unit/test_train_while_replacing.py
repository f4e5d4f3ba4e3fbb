"""Issue 38: a worker lost with no replacement ready (no notice, or a notice shorter than a replacement's boot)
does not leave every other node idle through a boot: with --train-while-replacing (the default) the run trains
on without it, and its replacement is asked for at once, for the run to grow back. The provider and SSH work is
replaced by what it would have done; the decisions are the agent's own."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit.test_shrink import NODES, Cluster
from xeoncluster.agent import regrowth, restart, run_watches
from xeoncluster.agent.attempt import Outcome
from xeoncluster.agent.regrowth import Regrowth
from xeoncluster.agent.restart import Recovery
from xeoncluster.agent.run_watches import RunWatches
from xeoncluster.agent.short_notice import TrainOnWithout, too_short
from xeoncluster.agent.shrink import ShrinkRule
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.node.events.events import EXIT_STOPPED, NoticeEvent
from xeoncluster.providers.base import Node
from xeoncluster.runs.record import Restart


@dataclass
class Done:
    shrunk: list[list[str]] = field(default_factory=list)
    removed_later: list[str] = field(default_factory=list)
    replaced: list[list[str]] = field(default_factory=list)


@pytest.fixture
def done(monkeypatch: pytest.MonkeyPatch) -> Done:
    seen = Done()

    def shrunk(_ctx: Any, record: Cluster, _shell: Any, lost: list[Node], _run_dir: str, remove: Any = None) -> int:
        seen.shrunk.append([n.name for n in lost])
        for node in lost:
            remove(node)
        record.set_nodes([n for n in record.nodes if n not in lost])
        return 40

    def replaced(_ctx: Any, _record: Cluster, _shell: Any, lost: list[tuple[Node, str]], _run: str) -> None:
        seen.replaced.append([n.name for n, _ in lost])

    monkeypatch.setattr(restart, "shrink", shrunk)
    monkeypatch.setattr(restart, "replace_lost", replaced)
    monkeypatch.setattr(restart, "restore_checkpoint", lambda *_: 40)
    monkeypatch.setattr(restart, "last_step", lambda *_: 52)
    monkeypatch.setattr(restart, "lost_nodes", lambda *_: [(NODES[2], "gone (unlisted, silent over SSH)")])
    monkeypatch.setattr(Recovery, "_remove_later", lambda _self, node: seen.removed_later.append(node.name))
    return seen


def recovery(cluster: Cluster, train_on: bool, min_nodes: int = 1, replacements: dict[str, Any] | None = None
             ) -> Recovery:
    ctx = SimpleNamespace(state=SimpleNamespace(load=lambda: cluster),
                          reporter=SimpleNamespace(warn=lambda _: None, step=lambda _: _Nothing(),
                                                   detail=lambda _: None))
    plan = SimpleNamespace(run="r1", home="/home/ubuntu", nodes=tuple(NODES))
    return Recovery(ctx, SimpleNamespace(close=lambda: None), plan, 52, {}, replacements or {},  # type: ignore[arg-type]
                    ShrinkRule(min_nodes, while_replacing=train_on))


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def test_a_worker_lost_without_notice_leaves_the_run_training_on_while_it_is_replaced(done: Done) -> None:
    cluster = Cluster()
    found = recovery(cluster, train_on=True)
    made = found.run(Outcome(1))
    assert made is not None and made.nodes_after == 2 and made.replacing and made.from_step == 40
    assert made.lost_steps == 12
    assert done.shrunk == [["node2"]] and done.replaced == [] and found.replacing
    assert done.removed_later == ["node2"]  # its termination is off the critical path
    assert "training on with 2 node(s) while it is replaced, resuming from checkpoint-40" in made.describe()


def test_wait_for_replacement_keeps_the_repair_under_the_lost_node_s_name(done: Done) -> None:
    made = recovery(Cluster(), train_on=False).run(Outcome(1))
    assert made is not None and made.nodes_after is None and not made.replacing
    assert done.replaced == [["node2"]] and done.shrunk == []


def test_below_min_nodes_the_replacement_is_waited_for(done: Done) -> None:
    made = recovery(Cluster(), train_on=True, min_nodes=3).run(Outcome(1))
    assert made is not None and made.nodes_after is None and done.replaced == [["node2"]]


def test_a_replacement_that_failed_to_launch_is_a_question_of_capacity(done: Done) -> None:
    """The noticed node's replacement could not be launched: the recovery asks once more, as it does for a
    cluster with no capacity, rather than calling the shrink a wait for a replacement under way."""
    failed = SimpleNamespace(old=NODES[2], new=None, error="no capacity in us-east-1a", wait=lambda: None)
    made = recovery(Cluster(), train_on=True, replacements={NODES[2].private_ip: failed}).run(Outcome(EXIT_STOPPED))
    assert made is not None and not made.replacing and done.replaced == [["node2"]]


def test_a_notice_too_short_for_a_replacement_is_one_the_run_trains_through() -> None:
    now = 1000.0
    assert too_short(now + 30, now, replace_seconds=60)   # 15 s left before the old job's margin
    assert not too_short(now + 120, now, replace_seconds=60)
    assert not too_short(None, now, replace_seconds=60)   # no deadline: a rebalance, replaced ahead as before
    assert not too_short(now + 30, now, replace_seconds=10)  # local nodes: ready in seconds


def watches(train_on: bool, provider: str = "aws") -> tuple[RunWatches, SimpleNamespace, list[tuple[Any, ...]]]:
    run = SimpleNamespace(
        noticed={}, replacements={}, plan=SimpleNamespace(nodes=tuple(NODES)), notes=[],
        request=TaskRequest(task="squad", train_while_replacing=train_on),
        ctx=SimpleNamespace(config=SimpleNamespace(provider=provider),
                            state=SimpleNamespace(load=lambda: SimpleNamespace(ready=True))),
        keeper=SimpleNamespace(noticed=lambda _a: None), interruptions_left=lambda: True)
    run.note = run.notes.append
    started: list[tuple[Any, ...]] = []
    found = RunWatches(run)  # type: ignore[arg-type]
    found._start_ahead = lambda nodes, added, left: started.append((nodes, added, left))  # type: ignore[method-assign]
    return found, run, started


def test_a_short_notice_starts_the_job_on_the_nodes_left_and_launches_no_replacement(
        monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[Node] = []
    monkeypatch.setattr(run_watches, "Replacement", lambda *a, **_k: launched.append(a[2]))
    found, run, started = watches(train_on=True)
    found._on_notice(NoticeEvent(rank=2, node=NODES[2].private_ip, reason="spot interruption notice",
                                 deadline=time.time() + 30))
    waiting = run.replacements[NODES[2].private_ip]
    assert isinstance(waiting, TrainOnWithout) and waiting.wait() is None and launched == []
    [(nodes, added, left)] = started
    assert [n.name for n in nodes] == ["node0", "node1"] and added == [] and 10 < left < 16
    assert any("trains on to its deadline, then on 2 node(s)" in note for note in run.notes), run.notes


@pytest.mark.parametrize(("train_on", "notice"), [(True, 120.0), (False, 30.0)])
def test_a_notice_long_enough_or_a_run_that_waits_gets_a_replacement_ahead(
        monkeypatch: pytest.MonkeyPatch, train_on: bool, notice: float) -> None:
    launched: list[Node] = []
    monkeypatch.setattr(run_watches, "Replacement",
                        lambda *a, **_k: SimpleNamespace(start=lambda: launched.append(a[2])))
    found, _run, started = watches(train_on=train_on)
    found._on_notice(NoticeEvent(rank=2, node=NODES[2].private_ip, deadline=time.time() + notice))
    assert launched == [NODES[2]] and started == []


def test_the_growth_after_a_shrink_while_replacing_asks_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[float] = []
    ready = threading.Event()

    def launch(*_: Any) -> list[Node]:
        asked.append(time.monotonic())
        return [NODES[2]]

    monkeypatch.setattr(regrowth, "launch_missing", launch)
    ctx = SimpleNamespace(state=SimpleNamespace(load=lambda: SimpleNamespace(ready=True, name="c1", nodes=[],
                                                                             config={"nodes": 3})),
                          reporter=SimpleNamespace(warn=lambda _: None, step=lambda _: _Nothing()),
                          shell=lambda: SimpleNamespace(close=lambda: None))
    began = time.monotonic()
    Regrowth(ctx, lambda _n: None, lambda _nodes: ready.set(), at_once=True).start()  # type: ignore[arg-type]
    assert ready.wait(5) and asked[0] - began < 2  # not after the 20 s a growth for capacity waits first


def test_old_records_have_no_shrink_while_replacing() -> None:
    assert Restart.model_validate({"node": "node1", "reason": "r", "from_step": 40, "seconds": 2, "lost_steps": 0,
                                   "nodes_after": 1}).replacing is False


def test_the_growth_launches_once_the_lost_node_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The new node takes the lost one's name, and a local node's id is its name: a removal still under way
    would take the new node with it."""
    order: list[str] = []
    ready = threading.Event()

    def removing() -> None:
        time.sleep(0.3)
        order.append("removed")

    monkeypatch.setattr(regrowth, "launch_missing", lambda *_: (order.append("launched"), [NODES[2]])[1])
    ctx = SimpleNamespace(state=SimpleNamespace(load=lambda: SimpleNamespace(ready=True, name="c1", nodes=[],
                                                                             config={"nodes": 3})),
                          reporter=SimpleNamespace(warn=lambda _: None, step=lambda _: _Nothing()),
                          shell=lambda: SimpleNamespace(close=lambda: None))
    removal = threading.Thread(target=removing)
    removal.start()
    Regrowth(ctx, lambda _n: None, lambda _nodes: ready.set(), at_once=True, after=(removal,)).start()  # type: ignore[arg-type]
    assert ready.wait(5) and order == ["removed", "launched"]


def test_the_line_that_resumes_a_run_keeps_wait_for_replacement() -> None:
    from xeoncluster.job.train_plan import resume_command

    waits = resume_command(TaskRequest(task="squad", demo=True, train_while_replacing=False), "c1", "r1")
    assert "--wait-for-replacement" in waits.split()
    assert "--wait-for-replacement" not in resume_command(TaskRequest(task="squad", demo=True), "c1", "r1")
