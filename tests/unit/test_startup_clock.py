"""Where a rank's start goes: the parts every rank's `ready` event and rank 0's `started` event carry
(node/diagnostics/startup_clock.py), kept in the run's record by rank."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from xeoncluster.agent.pace import Pace
from xeoncluster.agent.record_keeper import RecordKeeper
from xeoncluster.agent.run_watches import RunWatches
from xeoncluster.node.diagnostics.startup_clock import StartupClock, describe, process_started, read_parts
from xeoncluster.node.events.events import ReadyEvent, StartedEvent, StepEvent, event_from_json
from xeoncluster.runs.record import RankStartup, Restart, RunFiles, RunRecord, RunState


def test_each_part_runs_from_the_end_of_the_one_before_and_survives_the_event() -> None:
    clock = StartupClock(began=100.0, process=99.5)
    clock.marks = [("libraries", 102.0), ("data", 102.5), ("resume", 110.0)]
    parts = clock.parts()
    assert parts == {"startup_python_s": 0.5, "startup_libraries_s": 2.0, "startup_data_s": 0.5,
                     "startup_resume_s": 7.5}
    back = event_from_json(StartedEvent(step=40, metrics=parts).to_json())  # keys come back sorted
    assert list(read_parts(back.metrics)) == ["python", "libraries", "data", "resume"]
    assert describe(back.metrics) == "10.5s (python 0.5, libraries 2.0, data 0.5, resume 7.5)"


def test_a_process_start_after_the_clock_is_not_a_part_and_other_metrics_are_ignored() -> None:
    clock = StartupClock(began=100.0, process=100.2)
    clock.mark("process_group")
    assert list(read_parts(clock.parts())) == ["process_group"]
    assert describe({"eval_loss": 1.5, "exact": None}) == ""


def test_an_unknown_part_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown startup part"):
        StartupClock().mark("warmup")


def test_the_process_start_is_this_process_start() -> None:
    # psutil adds the boot time in whole seconds: within one second of it.
    started = process_started()
    assert started is not None and abs(started - psutil.Process().create_time()) < 1.05


# -- every rank's start, in the run's record (issue 38) -------------------------------------------
class Run(SimpleNamespace):
    @property
    def record(self) -> RunRecord:
        return self.keeper.record


def watching(tmp_path: Path) -> tuple[RunWatches, list[str]]:
    files = RunFiles(tmp_path / "r1")
    files.path.mkdir()
    record = RunRecord(run="r1", cluster="c1", task="squad", state=RunState.RUNNING)
    notes: list[str] = []
    run = Run(keeper=RecordKeeper(files, record), storage=SimpleNamespace(on_event=lambda _: None), pace=Pace(),
              note=notes.append, plan=SimpleNamespace(nodes=()), ctx=SimpleNamespace(provider=None))
    return RunWatches(run), notes  # type: ignore[arg-type]


def ready(rank: int, node: str, **parts: float) -> ReadyEvent:
    return ReadyEvent(rank=rank, node=node, step=40, metrics={f"startup_{k}_s": v for k, v in parts.items()})


def test_every_rank_reports_its_start_and_the_record_keeps_the_latest_launch_by_rank(tmp_path: Path) -> None:
    watches, _ = watching(tmp_path)
    keeper = watches.run.keeper
    watches.on_event(ready(1, "10.0.0.3", libraries=9.0, data=0.5))
    watches.on_event(ready(0, "10.0.0.2", libraries=3.0, process_group=6.5, evil=99.0))
    assert [(r.rank, r.node, r.parts) for r in keeper.record.startup] == [
        (0, "10.0.0.2", {"libraries": 3.0, "process_group": 6.5}), (1, "10.0.0.3", {"libraries": 9.0, "data": 0.5})]
    summary = RunRecord.model_validate_json(keeper.record.model_dump_json()).summary()
    assert summary["startup"][1] == {"rank": 1, "node": "10.0.0.3", "parts": {"libraries": 9.0, "data": 0.5}}
    keeper.running(["node0", "node1"], 2, 2)  # the next launch reports afresh
    assert keeper.record.startup == []


def test_after_a_relaunch_the_log_names_the_rank_that_was_slowest_to_start(tmp_path: Path) -> None:
    watches, notes = watching(tmp_path)
    watches.run.keeper.restarted(Restart(node="node1", reason="gone", from_step=40, seconds=1.0, lost_steps=0))
    watches.on_event(ready(0, "10.0.0.2", libraries=3.0, process_group=6.5))
    watches.on_event(StartedEvent(step=40, metrics={"startup_libraries_s": 3.0, "startup_process_group_s": 6.5}))
    watches.on_event(ready(1, "10.0.0.3", libraries=9.0, data=1.5))
    watches.on_event(StepEvent(step=41))
    watches.on_event(StepEvent(step=42))
    assert notes == ["relaunched: rank 0 was ready to train 9.5s (libraries 3.0, process group 6.5) after its "
                     "process started",
                     "relaunched: the slowest rank to start was rank 1 on 10.0.0.3, 10.5s, most of it libraries "
                     "(9.0s)"]


def test_a_rank_that_says_it_started_when_it_did_not_is_refused() -> None:
    with pytest.raises(ValueError):
        RankStartup(rank=1, parts={"libraries": -3.0})
    with pytest.raises(ValueError):
        RankStartup(rank=1, node="x" * 65)


def test_every_rank_says_where_its_start_went_and_only_rank_0_that_the_run_started(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from xeoncluster.node.events.event_reporter import EventReporter
    from xeoncluster.node.events.events import EVENT_KEY_ENV, parse_line

    monkeypatch.setenv(EVENT_KEY_ENV, "ab" * 32)
    for zero in (False, True):
        clock = StartupClock()
        clock.mark("libraries")
        state = SimpleNamespace(is_world_process_zero=zero, global_step=40, max_steps=100)
        EventReporter("10.0.0.3", clock).on_train_begin(None, state, None)
    events = [parse_line(line, "ab" * 32) for line in capsys.readouterr().out.splitlines()]
    assert [e.kind for e in events if e is not None] == ["ready", "ready", "started"]
    first = events[0]
    assert first is not None and first.step == 40 and list(read_parts(first.metrics))[-2:] == ["libraries", "resume"]
