"""A followed run's pace for its progress bar, from the ranks' step events (never from log text)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from xeoncluster.node.events.events import Progress, StartedEvent

# Enough step events to smooth a slow logging step out, few enough to follow a change of pace.
WINDOW = 20


@dataclass
class StepPace:
    """Steps/s over the newest step events (the ranks' clock), and the time left at that rate."""

    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, event: Progress) -> None:
        if event.step is None:
            return
        # A new invocation (a resume, a restart from a checkpoint) has its own pace.
        if isinstance(event, StartedEvent) or (self.recent and event.step < self.recent[-1][1]):
            self.recent.clear()
        self.recent.append((event.time, event.step))

    def steps_per_second(self) -> float | None:
        if len(self.recent) < 2:
            return None
        (first_time, first_step), (last_time, last_step) = self.recent[0], self.recent[-1]
        seconds, steps = last_time - first_time, last_step - first_step
        return steps / seconds if seconds > 0 and steps > 0 else None

    def eta_seconds(self, total: int) -> float | None:
        rate = self.steps_per_second()
        return (total - self.recent[-1][1]) / rate if rate else None
