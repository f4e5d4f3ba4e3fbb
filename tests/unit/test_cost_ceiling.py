"""The spending ceiling, on a clock and prices the test controls: a run at its `train --max-cost` stops
the way a cancel stops it (checkpointed, stored, one line that says why and how it goes on), and a
cluster at its `max_cost` is removed the way its `max_hours` deadline removes it. A provider with no
prices refuses either, and bad values are refused before anything is made."""
from __future__ import annotations

import math
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from xeoncluster.agent import cluster_spend, record_keeper, run_watches
from xeoncluster.agent.cluster_spend import PRICE_SECONDS, ClusterSpend, spent
from xeoncluster.agent.cost_ceiling import stopped_line
from xeoncluster.agent.current_run import CurrentRun
from xeoncluster.agent.record_keeper import RecordKeeper
from xeoncluster.agent.run_watches import RunWatches
from xeoncluster.agent.watch import Watcher
from xeoncluster.cli import main
from xeoncluster.cluster.autostop import SETTINGS, STATUS, AutoStop, WatchStatus
from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import get_stack
from xeoncluster.job.train_plan import check_request, resume_command, resume_line
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.providers.base import Node
from xeoncluster.runs.record import RunFiles, RunRecord, RunState

T0 = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    moved = Clock()
    for module in (record_keeper, run_watches):
        monkeypatch.setattr(module.time, "time", moved)
    monkeypatch.setattr(run_watches.time, "sleep", lambda _: None)
    return moved


class Attempt:
    """The ranks of a launch: asked to stop, they checkpoint and the run ends."""

    def __init__(self, run: CurrentRun) -> None:
        self.run, self.asked = run, 0

    def ask_to_stop(self, _control: object) -> None:
        self.asked += 1
        self.run.keeper.ended(RunState.CANCELLED, 130, "", 40)


def agent_run(tmp_path: Path, max_cost: float | None) -> CurrentRun:
    files = RunFiles(tmp_path / "r1")
    files.path.mkdir()
    record = RunRecord(run="r1", cluster="c1", task="squad", state=RunState.RUNNING)
    files.save(record)
    quiet = SimpleNamespace(warn=lambda _: None)
    ctx = SimpleNamespace(reporter=quiet, state=SimpleNamespace(load=lambda: None))
    plan = SimpleNamespace(run="r1", home="/home/ubuntu", nodes=())
    run = CurrentRun(ctx, files, RecordKeeper(files, record), None,  # type: ignore[arg-type]
                     TaskRequest(task="squad", max_cost=max_cost), plan, None)  # type: ignore[arg-type]
    run.attempt = Attempt(run)  # type: ignore[assignment]
    return run


def test_a_run_under_its_ceiling_goes_on_and_one_at_it_stops(tmp_path: Path, clock: Clock) -> None:
    run = agent_run(tmp_path, max_cost=3.0)
    run.keeper.priced(2.0)  # two nodes at $1/hour
    watches = RunWatches(run)
    clock.now += 89 * 60
    assert watches.stop_reason() == "" and run.keeper.cost_now(clock.now) == pytest.approx(89 / 30)
    clock.now += 60
    assert watches.stop_reason() == "stopped at its --max-cost ceiling: $3.0000 spent of $3"


def test_without_a_ceiling_a_run_never_stops_for_its_cost(tmp_path: Path, clock: Clock) -> None:
    run = agent_run(tmp_path, max_cost=None)
    run.keeper.priced(100.0)
    clock.now += 1000 * 3600
    assert RunWatches(run).stop_reason() == ""


def test_at_its_ceiling_the_ranks_are_asked_to_checkpoint_and_stop_and_the_log_says_why(tmp_path: Path,
                                                                                         clock: Clock) -> None:
    run = agent_run(tmp_path, max_cost=1.0)
    run.keeper.priced(1.0)
    clock.now += 3601
    RunWatches(run).watch_cancel()
    assert run.cancelled.is_set() and run.attempt.asked == 1  # type: ignore[union-attr]
    assert run.stopped.startswith("stopped at its --max-cost ceiling: $1.0003 spent of $1")
    assert f"agent: {run.stopped}: the ranks save a checkpoint and stop" in run.files.log.read_text()
    assert not run.files.cancel.exists(), "the ceiling is the agent's own stop, not a user's cancel"


def test_a_user_cancel_is_still_a_cancel(tmp_path: Path, clock: Clock) -> None:
    run = agent_run(tmp_path, max_cost=1.0)
    run.files.cancel.touch()
    RunWatches(run).watch_cancel()
    assert run.cancelled.is_set() and run.stopped == ""
    assert "agent: cancel requested: the ranks save a checkpoint and stop" in run.files.log.read_text()


def test_the_stopped_run_says_where_its_checkpoint_is_and_the_line_that_resumes_it() -> None:
    request = TaskRequest(task="squad", demo=True, max_cost=2.5, max_interruptions=3,
                          trainer_args=("--learning_rate", "5e-5"))
    submitted_again = resume_command(request, "c1", "r1", resume=False)
    assert "--max-cost 2.5" in submitted_again, "submitted from the start again, it keeps its ceiling"
    line = stopped_line("stopped at its --max-cost ceiling: $2.5100 spent of $2.5", "s3://b/xc/c1/r1",
                        submitted_again)
    resume = resume_command(request, "c1", "r1")
    assert resume_line(submitted_again) == resume
    assert "--max-cost" not in resume and shlex.split(resume)[-5:] == ["r1", "--resume", "--", "--learning_rate",
                                                                      "5e-5"]
    assert line == ("stopped at its --max-cost ceiling: $2.5100 spent of $2.5; its checkpoint is stored in "
                    f"s3://b/xc/c1/r1; continue it with `{resume}` (add --max-cost for a new ceiling)")
    assert "\n" not in line


@pytest.mark.parametrize("bad", [-1.0, 0.0, math.nan, math.inf])
def test_a_bad_max_cost_is_refused(bad: float) -> None:
    with pytest.raises(ConfigError, match="--max-cost must be a number of US dollars above 0"):
        check_request(TaskRequest(task="squad", max_cost=bad), get_stack("stock"))


def invoke(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["xeoncluster", *argv])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return int(exit_info.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize(("argv", "says"), [
    (["train", "squad", "--demo", "--max-cost", "5"], "error: --max-cost: the local provider has no node prices"),
    (["train", "squad", "--demo", "--max-cost", "-2"], "error: --max-cost must be a number of US dollars above 0"),
    (["train", "squad", "--demo", "--max-cost", "nan"], "error: --max-cost must be a number of US dollars above 0"),
    (["up", "--max-cost", "5"], "error: max_cost (--max-cost): the local provider has no node prices"),
    (["up", "--max-cost", "-2"], "max_cost: must be between 0 and"),
    (["up", "--max-cost", "nan"], "max_cost: input should be a finite number"),
])
def test_the_cli_refuses_in_one_line_with_exit_2_and_makes_nothing(argv: list[str], says: str, xc_home: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = invoke([*argv, "--provider", "local", "--name", "cc"], capsys, monkeypatch)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(xc_home.iterdir()) == []


# -- the cluster's ceiling -----------------------------------------------------------------------
def node(name: str, price: float | None, launched_at: float | None) -> Node:
    return Node(name, f"i-{name}", "10.0.0.2", "10.0.0.2", "worker", "spot", price_per_hour=price,
                launched_at=launched_at)


def test_each_node_costs_from_its_launch_or_else_from_the_cluster_s_creation() -> None:
    nodes = [node("node0", 1.0, T0), node("node1", 2.0, T0 + 1800), node("node2", 4.0, None), node("node3", None, T0)]
    assert spent(nodes, T0 - 3600, T0 + 3600) == pytest.approx(1.0 + 1.0 + 8.0)


def test_prices_are_asked_at_most_every_few_minutes() -> None:
    asked: list[int] = []

    def priced() -> list[Node]:
        asked.append(1)
        return [node("node0", 3.6, T0)]

    spend = ClusterSpend(priced)
    assert spend(T0 + 1000, T0) == pytest.approx(1.0)
    assert spend(T0 + 1000 + PRICE_SECONDS - 1, T0) == pytest.approx(3.6 * (1000 + PRICE_SECONDS - 1) / 3600)
    assert len(asked) == 1
    spend(T0 + 1000 + PRICE_SECONDS, T0)
    assert len(asked) == 2


class Removals:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def remove(self, by: str, detail: str) -> None:
        self.calls.append((by, detail))


def cluster_watch(tmp_path: Path, clock: Clock, spend: object) -> tuple[Watcher, Removals, list[str]]:
    settings = AutoStop(idle_minutes=0, max_cost=2.0, created_at=clock.now)
    (tmp_path / SETTINGS).write_text(settings.model_dump_json())
    removals, reports = Removals(), []
    busy = SimpleNamespace(busy=lambda: "run r1 is running")
    watch = Watcher(tmp_path, busy, removals, reports.append, clock=clock, spend=spend)  # type: ignore[arg-type]
    return watch, removals, reports


def test_a_cluster_at_its_max_cost_is_removed_whatever_runs(tmp_path: Path) -> None:
    clock = Clock()
    spend = ClusterSpend(lambda: [node("node0", 0.5, T0), node("node1", 0.5, T0)])
    watch, removals, _ = cluster_watch(tmp_path, clock, spend)
    clock.now += 3600
    assert watch.check() and removals.calls == []
    status = WatchStatus.model_validate_json((tmp_path / STATUS).read_text())
    assert status.spent_usd == pytest.approx(1.0) and "$1.00 of its max_cost spent" in status.describe(
        AutoStop(idle_minutes=0, max_cost=2.0, created_at=T0), clock.now)
    clock.now += 3600
    assert not watch.check()
    assert removals.calls == [("cost", "at its max_cost ceiling ($2 spent of $2)")]


def test_an_unknown_cost_never_removes_the_cluster(tmp_path: Path) -> None:
    clock = Clock()

    def no_prices() -> list[Node]:
        raise OSError("no route to the price list")

    watch, removals, reports = cluster_watch(tmp_path, clock, ClusterSpend(no_prices))
    clock.now += 100 * 3600
    assert watch.check() and removals.calls == []
    assert reports == ["could not price the cluster's nodes (OSError: no route to the price list)"]


def test_max_cost_alone_keeps_the_watch_agent_on_and_is_described() -> None:
    settings = AutoStop(idle_minutes=0, max_cost=12.5, created_at=T0)
    assert not settings.off and settings.removes_itself
    assert "once its nodes have cost $12.5 whatever runs (max_cost)" in settings.describe()


def test_the_cost_removal_stops_the_active_run_first_like_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from xeoncluster.agent import self_removal

    stopped: list[str] = []
    removal = self_removal.SelfRemoval(SimpleNamespace(), None, stopped.append)  # type: ignore[arg-type]
    monkeypatch.setattr(removal, "_stop_runs", lambda: stopped.append("runs stopped") or [])
    monkeypatch.setattr(self_removal.time, "time", lambda: T0)
    ctx = SimpleNamespace(state=SimpleNamespace(load=lambda: None), config=SimpleNamespace(name="c1", provider="p"),
                          provider=SimpleNamespace())
    removal.ctx = ctx  # type: ignore[assignment]
    monkeypatch.setattr(self_removal.down, "remove_cluster", lambda *_, **__: stopped.append("removed"))
    removal._remove("cost", "at its max_cost ceiling ($2.00 spent of $2)")
    assert stopped[1:] == ["runs stopped", "removed"]


def test_the_watch_agent_prices_only_where_the_provider_has_prices() -> None:
    assert cluster_spend.cluster_spend(SimpleNamespace(provider=SimpleNamespace())) is None  # type: ignore[arg-type]


def test_runs_says_why_a_run_stopped_at_its_ceiling_and_how_it_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    from xeoncluster.cli import render_runs

    line = stopped_line("stopped at its --max-cost ceiling: $5.0012 spent of $5", "",
                        "xeoncluster train squad --name c1 --demo --max-cost 5 --run r1")
    stopped = RunRecord(run="r1", cluster="c1", task="squad", state=RunState.CANCELLED, step=40, error=line)
    cancelled = RunRecord(run="r2", cluster="c1", task="squad", state=RunState.CANCELLED, error="cancelled")
    render_runs.runs_table([stopped, cancelled], "c1", [], {})
    out = " ".join(capsys.readouterr().out.split())
    assert ("run r1: stopped at its --max-cost ceiling: $5.0012 spent of $5; its checkpoint is on the master; "
            "continue it with `xeoncluster train squad --name c1 --demo --run r1 --resume`") in out
    assert "run r2:" not in out
