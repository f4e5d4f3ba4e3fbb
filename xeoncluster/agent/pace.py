"""An active run's pace from its step events: the loss, the median step time, the ETA, and whether the
step has stopped advancing (a rank stuck in an all-reduce looks exactly like that).

Each launch starts a new pace: the steps before a restart say nothing of the time the rendezvous
takes. Stall detection waits for the launch's first step, since loading a model may take minutes.
"""
from __future__ import annotations

import itertools
import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from xeoncluster.cluster.untrusted import LATEST, MOST
from xeoncluster.runs.record import Live
from xeoncluster.runs.zone_traffic import ZoneSpread

WINDOW = 64
STALL_FACTOR = 10.0  # a step this many times slower than the median is a hang


@dataclass
class Pace:
    points: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=WINDOW))
    loss: float | None = None
    evals: dict[str, float] = field(default_factory=dict)
    alive: float = 0.0  # the last sign of life that was no new step
    spread: ZoneSpread | None = None  # the launch's nodes and model, for the traffic between zones
    hourly_traffic_said: bool = False  # the log has the traffic at this launch's pace

    def step(self, when: float, step: int, loss: float | None) -> None:
        """A step event; one that repeats the last step (the ranks evaluating) only says they are alive."""
        if self.points and step <= self.points[-1][1]:
            self.alive = max(self.alive, when)
            return
        self.points.append((when, step))
        if loss is not None:
            self.loss = loss

    def step_seconds(self) -> float | None:
        times = [(b[0] - a[0]) / (b[1] - a[1]) for a, b in itertools.pairwise(self.points)]
        return statistics.median(times) if times else None

    def eta(self, step: int, total: int | None) -> float | None:
        seconds = self.step_seconds()
        if seconds is None or not total:
            return None
        return max(0, total - step) * seconds

    def stalled(self, now: float, minimum: float) -> float | None:
        """Seconds since the last step, when that is longer than STALL_FACTOR median steps and than
        `minimum` seconds; None while the run steps (or has not stepped yet in this launch)."""
        seconds = self.step_seconds()
        if not self.points or seconds is None:
            return None
        quiet = now - max(self.points[-1][0], self.alive)
        return quiet if quiet > max(STALL_FACTOR * seconds, minimum) else None

    def live(self, step: int, total: int | None, cost_usd: float, usd_per_hour: float) -> Live:
        seconds = self.step_seconds()
        eta = self.eta(step, total)
        per_second = within(1 / seconds) if seconds else None
        return Live(loss=within(self.loss, -MOST), step_seconds=within(seconds),
                    steps_per_second=per_second, eta_seconds=within(eta),
                    last_step_at=within(self.points[-1][0], 0.0, LATEST) if self.points else None,
                    projected_cost_usd=None if eta is None else within(cost_usd + usd_per_hour * eta / 3600),
                    evals={k: v for k, v in self.evals.items() if within(v, -MOST) is not None},
                    zone_traffic=self.spread.estimate(per_second) if self.spread else None)


def within(value: float | None, low: float = 0.0, high: float = MOST) -> float | None:
    """A value the run record takes, or none: a diverged loss (NaN) or a rank's clock that stepped back
    must not stop the agent from writing the record."""
    return value if value is not None and math.isfinite(value) and low <= value <= high else None
