"""The node watch stops a job once the provider no longer lists one of its nodes and that node does
not answer over SSH either; never on a failed question, nor on the provider's word alone."""
from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from xeoncluster.agent.node_watch import NodeWatch
from xeoncluster.core.errors import ProviderError, RemoteError
from xeoncluster.remote.shell import CommandResult


class Fleet:
    """The provider's answers, in order; the last one repeats."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    def nodes(self, config: object, priced: bool = True) -> list[SimpleNamespace]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return [SimpleNamespace(name=name) for name in answer]


class Shell:
    """SSH to the nodes: those in `silent` do not answer (a refused or timed-out connection)."""

    def __init__(self, silent: set[str]) -> None:
        self.silent, self.asked, self.closed = silent, [], 0

    def run(self, nodes: list[SimpleNamespace], command: str) -> dict[str, CommandResult]:
        [node] = nodes
        self.asked.append(node.name)
        if node.name in self.silent:
            raise RemoteError(f"{node.name}: connection timed out")
        return {node.name: CommandResult(node.name, 0, "", "")}

    def close(self) -> None:
        self.closed += 1


def watch(fleet: Fleet, names: list[str], silent: set[str] | None = None, reports: list[str] | None = None,
          closed: set[str] | None = None, polls: bool = False) -> tuple[NodeWatch, threading.Event,
                                                                   list[list[str]]]:
    """With `closed` (the nodes whose SSH port takes no connection) the port is knocked on each tick and the
    provider asked about every node never; without, or with `polls`, the provider is asked about every node
    each tick."""
    called, seen = threading.Event(), []

    def on_gone(gone: list[str]) -> None:
        seen.append(gone)
        called.set()
    shell = Shell(set(names) if silent is None else silent)
    ctx = SimpleNamespace(provider=fleet, config=None, shell=lambda: shell)
    nodes = [SimpleNamespace(name=name) for name in names]
    report = (reports if reports is not None else []).append
    interval = 0.01 if closed is None or polls else 3600.0
    return NodeWatch(ctx, nodes, on_gone, report, interval=interval, probe_interval=0.01,  # type: ignore[arg-type]
                     probe=lambda node: node.name not in (closed or set())), called, seen


def test_a_node_the_provider_stops_listing_stops_the_job_once() -> None:
    fleet = Fleet(["node0", "node1"], ProviderError("DescribeInstances throttled"), ["node0", "node1"], ["node0"])
    node_watch, called, seen = watch(fleet, ["node0", "node1"])
    with node_watch:
        assert called.wait(5)
    assert seen == [["node1"]] and node_watch.gone == ["node1"]


def test_nothing_happens_while_every_node_is_listed_or_the_question_fails() -> None:
    node_watch, called, seen = watch(Fleet(["node0", "node1"], ProviderError("no answer"), ["node1", "node0"]),
                                     ["node0", "node1"])
    with node_watch:
        assert not called.wait(0.3)
    assert seen == []


def test_a_node_the_provider_forgot_but_that_answers_is_not_gone() -> None:
    reports: list[str] = []
    node_watch, called, seen = watch(Fleet(["node0"]), ["node0", "node1"], silent=set(), reports=reports)
    with node_watch:
        assert not called.wait(0.3)
    assert seen == [] and "the provider no longer lists node1, but it answers; it is asked again" in reports


def test_only_the_silent_one_of_two_unlisted_nodes_is_gone() -> None:
    node_watch, called, seen = watch(Fleet(["node0"]), ["node0", "node1", "node2"], silent={"node2"})
    with node_watch:
        assert called.wait(5)
    assert seen == [["node2"]]


def test_a_provider_outage_is_reported_once_and_its_end_once() -> None:
    reports: list[str] = []
    outage = ProviderError("DescribeInstances: 503 Unavailable")
    fleet = Fleet(outage, outage, outage, ["node0", "node1"])
    node_watch, called, _ = watch(fleet, ["node0", "node1"], reports=reports)
    with node_watch:
        assert not called.wait(0.3)
    assert len(reports) == 2 and "the provider does not answer" in reports[0] and "503" in reports[0], reports
    assert reports[1].startswith("the provider answers again after"), reports


def test_a_node_whose_port_is_closed_is_gone_at_once_when_the_provider_no_longer_lists_it() -> None:
    fleet = Fleet(["node0", "node1"], ["node0"])
    node_watch, called, seen = watch(fleet, ["node0", "node1"], closed={"node1"})
    with node_watch:
        assert called.wait(5)
    assert seen == [["node1"]]


class HangingShell(Shell):
    """SSH to a machine whose network is gone: the connection neither takes nor fails for a long while."""

    def run(self, nodes: list[SimpleNamespace], command: str) -> dict[str, CommandResult]:
        self.asked.append(nodes[0].name)
        threading.Event().wait(3)
        raise RemoteError(f"{nodes[0].name}: connection timed out")


def test_a_poll_that_finds_a_node_unlisted_and_its_port_closed_does_not_wait_for_ssh() -> None:
    """A poll came first, and held the stop for SSH's connect timeout: 6.0 s from the last step to the job's
    end on the stand-in, against item 2's 5 s."""
    import time

    node_watch, called, seen = watch(Fleet(["node0"]), ["node0", "node1"], closed={"node1"}, polls=True)
    shell = HangingShell(set())
    node_watch.ctx.shell = lambda: shell  # type: ignore[attr-defined]
    started = time.monotonic()
    with node_watch:
        assert called.wait(5)
    assert seen == [["node1"]] and shell.asked == [] and time.monotonic() - started < 1.0


def test_a_closed_port_alone_stops_nothing_nor_does_a_provider_that_does_not_answer() -> None:
    for fleet in (Fleet(["node0", "node1"]), Fleet(ProviderError("DescribeInstances: 503 Unavailable"))):
        node_watch, called, seen = watch(fleet, ["node0", "node1"], closed={"node1"})
        with node_watch:
            assert not called.wait(0.3)
        assert seen == []


def test_while_every_port_answers_the_provider_is_not_asked() -> None:
    node_watch, called, _ = watch(Fleet(RuntimeError("the provider was asked")), ["node0", "node1"], closed=set())
    with node_watch:
        assert not called.wait(0.2)


def test_a_lost_node_stops_its_job_within_two_seconds_of_its_loss() -> None:
    """The loss, the knock that finds the port closed, the provider's word, and the job's stop (issue 38's
    5 s from the loss to the job's end, of which the stop takes its 1 s of grace)."""
    import time

    from xeoncluster.agent.node_watch import NodeWatch as RealWatch

    lost = threading.Event()
    fleet = SimpleNamespace(nodes=lambda config, priced=True: [SimpleNamespace(name=n) for n in
                                                               (("node0",) if lost.is_set() else ("node0", "node1"))])
    called = threading.Event()
    nodes = [SimpleNamespace(name=name) for name in ("node0", "node1")]
    node_watch = RealWatch(SimpleNamespace(provider=fleet, config=None), nodes,  # type: ignore[arg-type]
                           lambda _: called.set(), probe=lambda node: not (lost.is_set() and node.name == "node1"))
    with node_watch:
        time.sleep(1.5)
        lost.set()
        started = time.monotonic()
        assert called.wait(5)
        assert time.monotonic() - started < 2.0


def test_a_stop_after_a_loss_waits_one_second_for_the_sigint_not_ten() -> None:
    from xeoncluster.agent.node_watch import stop_command

    assert "$(seq 5)" in stop_command("/r/launcher.pid", 1.0) and "$(seq 50)" in stop_command("/r/launcher.pid")


def test_no_names_ask_nothing() -> None:
    fleet = Fleet(RuntimeError("the provider was asked"))
    node_watch, called, _ = watch(fleet, [])
    with node_watch:
        assert not called.wait(0.1)
    assert node_watch._thread is None


def test_after_a_job_ended_a_silent_provider_leaves_ssh_to_decide_which_node_was_lost() -> None:
    from xeoncluster.operations.repair import health

    nodes = [SimpleNamespace(name=name) for name in ("node0", "node1")]
    ctx = SimpleNamespace(provider=Fleet(ProviderError("DescribeInstances timed out")), config=None)
    record = SimpleNamespace(node_list=lambda: nodes)
    found = health(ctx, record, Shell({"node1"}))  # type: ignore[arg-type]
    assert [(h.node.name, h.alive) for h in found] == [("node0", True), ("node1", False)]
    assert "connection timed out" in found[1].reason and "DescribeInstances timed out" in found[1].reason


def test_the_end_of_a_job_does_not_wait_for_a_usage_sample_stuck_on_a_lost_node() -> None:
    """SSH to an instance reclaimed with no notice can hang for good (no reset comes back): the agent
    waited for the usage watch's sample forever after the job had ended, and never recovered the run
    (benchmarks/bench_recovery.py on the stand-in)."""
    import time
    from pathlib import Path

    from xeoncluster.agent.usage_watch import UsageWatch

    stuck, sampling = threading.Event(), threading.Event()

    class HangingShell:
        def run(self, nodes: list[Any], command: str) -> dict[str, CommandResult]:
            sampling.set()
            stuck.wait()
            return {}

        def close(self) -> None:
            pass

    ctx = SimpleNamespace(shell=HangingShell)
    usage = UsageWatch(ctx, [SimpleNamespace(name="node1")], "/home/u", SimpleNamespace(usage=Path("/dev/null")),
                       lambda _: None, lambda: None, interval=0.01)  # type: ignore[arg-type]
    usage.join_seconds = 0.5
    ended = threading.Event()

    def job() -> None:
        with usage:
            assert sampling.wait(5)
        ended.set()

    started = time.monotonic()
    threading.Thread(target=job, daemon=True).start()
    try:
        assert ended.wait(10), "the job's end waited for the stuck sample"
        assert time.monotonic() - started < 5
    finally:
        stuck.set()


def test_the_end_of_a_job_cuts_a_stuck_usage_sample_short_and_closes_the_watch() -> None:
    """The 10 s the job's end waited for such a sample were part of the no-notice recovery pause
    (bench_recovery on the stand-in): closing the watch's connections ends the sample at once."""
    import time
    from pathlib import Path

    from xeoncluster.agent.usage_watch import UsageWatch

    closed, sampling = threading.Event(), threading.Event()

    class ShellUntilClosed:
        def run(self, nodes: list[Any], command: str) -> dict[str, CommandResult]:
            sampling.set()
            closed.wait()
            raise RemoteError("node1: the connection was closed")

        def close(self) -> None:
            closed.set()

    scalars = SimpleNamespace(closed=False)
    scalars.close = lambda: setattr(scalars, "closed", True)
    usage = UsageWatch(SimpleNamespace(shell=ShellUntilClosed), [SimpleNamespace(name="node1")], "/home/u",
                       SimpleNamespace(usage=Path("/dev/null")), lambda _: None, lambda: None, interval=0.01,
                       scalars=scalars)  # type: ignore[arg-type]
    with usage:
        assert sampling.wait(5)
        started = time.monotonic()
    assert time.monotonic() - started < 2 and usage.join_seconds == 10
    assert usage._thread is not None and not usage._thread.is_alive() and scalars.closed
