"""Progress lines from rank 0, and the CLI sink that shows them, with one live bar on a terminal drawn from the
ranks' step events."""

from __future__ import annotations

import io

from xeoncluster.cli.render_training import TrainingLines
from xeoncluster.node.events.events import StepEvent
from xeoncluster.node.events.progress_lines import Pace, clock

STEP = "[0] step 30/120  loss 2.1728  lr 7.58e-04  epoch 0.16  79.7 samples/s  eta 0:00:18"
LINES = ["[0] squad: 3000 examples -> 3000 features", STEP, "[0] eval  step 30/120  eval_loss 1.9909",
         "[1] step 30/120 is not rank 0", "[0] trained 120 steps in 38.4s"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_pace_measures_this_invocation_only() -> None:
    pace = Pace()
    pace.start(step=100, now=10.0)
    assert pace.samples_per_second(step=110, global_batch=32, now=20.0) == 32.0
    assert pace.eta_seconds(step=110, max_steps=150, now=20.0) == 40.0
    assert pace.eta_seconds(step=100, max_steps=150, now=20.0) is None
    assert clock(3725.4) == "1:02:05" and clock(None) == "?"


def test_not_a_terminal_prints_every_line_plainly() -> None:
    out = io.StringIO()
    sink = TrainingLines(out)
    for line in LINES:
        sink(line)
    sink.close()
    assert out.getvalue() == "".join(line + "\n" for line in LINES)


def test_terminal_shows_a_bar_for_steps_and_other_lines_above_it() -> None:
    out = Terminal()
    sink = TrainingLines(out)
    sink.step(StepEvent(time=10.0, step=20, total=120, loss=2.5))
    for line in LINES:
        sink(line)
    sink.step(StepEvent(time=20.0, step=30, total=120, loss=2.1728))
    sink.close()
    sink("after the bar")
    text = out.getvalue()
    assert STEP not in text
    assert "step 30/120" in text and "loss 2.1728" in text and "1.00 steps/s" in text and "eta 0:01:30" in text
    for line in LINES[:1] + LINES[2:]:
        assert line in text
    assert text.endswith("after the bar\n")
