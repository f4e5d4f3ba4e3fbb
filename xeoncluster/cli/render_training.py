"""The sink for a followed run: its log lines, and on a terminal one live progress bar driven by the
ranks' typed step events. Formatting only; every line passes the display door (runs/display.py)."""
from __future__ import annotations

import atexit
import re
import sys
import threading
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from xeoncluster.cli.render_live import clock
from xeoncluster.node.events.events import RunEvent, StartedEvent, StepEvent
from xeoncluster.runs.display import inert, shown
from xeoncluster.runs.step_pace import StepPace

# Rank 0's progress line (xeoncluster/node/events/progress_lines.py): while the bar shows the steps, the line would
# only repeat it. It is matched to be left out, never read.
STEP_LINE = re.compile(r"^(?:\[0\] )?step \d+/\d+\s")
BAR_EVENTS = (StartedEvent, StepEvent)


def _training_progress(stream: TextIO) -> Progress:
    return Progress(
        TextColumn("train", markup=False), BarColumn(),
        TextColumn("step {task.completed:.0f}/{task.total:.0f}", markup=False),
        TextColumn("loss {task.fields[loss]}", markup=False),
        TextColumn("{task.fields[speed]} steps/s", markup=False), TextColumn("eta {task.fields[eta]}", markup=False),
        console=Console(file=stream, highlight=False), auto_refresh=True)


class TrainingLines:
    """On a terminal, the run's step events drive one live progress bar and every line prints above it
    (rank 0's step lines, which the bar shows, are left out); otherwise every line is printed as it comes."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self._stream = stream
        self._live = live
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._pace = StepPace()
        self._loss = "?"

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stdout

    @property
    def live(self) -> bool:
        return self.stream.isatty() if self._live is None else self._live

    def steps(self) -> Callable[[RunEvent], None] | None:
        """What the follower tells the step events to: nothing when there is no bar to draw."""
        return self.step if self.live else None

    def __call__(self, line: str) -> None:
        text = inert(line)
        with self._lock:
            if self._progress is None:
                self.stream.write(text + "\n")
                self.stream.flush()
            elif not STEP_LINE.match(text):
                self._progress.console.print(shown(text), highlight=False, emoji=False, soft_wrap=True)

    def step(self, event: RunEvent) -> None:
        if not isinstance(event, BAR_EVENTS) or event.step is None or not event.total or not self.live:
            return
        with self._lock:
            self._pace.add(event)
            if isinstance(event, StepEvent) and event.loss is not None:
                self._loss = f"{event.loss:.4f}"
            self._show(event.step, event.total)

    def _show(self, step: int, total: int) -> None:
        if self._progress is None:
            self._progress = _training_progress(self.stream)
            self._task = self._progress.add_task("train", total=total, loss="", speed="", eta="")
            self._progress.start()
            atexit.register(self.close)
        assert self._task is not None
        rate, eta = self._pace.steps_per_second(), self._pace.eta_seconds(total)
        self._progress.update(self._task, completed=step, total=total, loss=self._loss,
                              speed=f"{rate:.2f}" if rate else "?", eta=clock(eta) if eta is not None else "?")

    def close(self) -> None:
        """Stop the bar (it stays on screen as drawn last); later lines print plainly."""
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
                self._task = None
            self._pace, self._loss = StepPace(), "?"


echo_line = TrainingLines()
