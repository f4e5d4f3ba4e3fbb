"""Where a rank's start goes: the parts rank 0's `started` event carries (node/diagnostics/startup_clock.py)."""
from __future__ import annotations

import psutil
import pytest

from xeoncluster.node.diagnostics.startup_clock import StartupClock, describe, process_started, read_parts
from xeoncluster.node.events.events import StartedEvent, event_from_json


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
