"""Where a rank's start went, from its process starting to its first step, in parts.

After a lost node the relaunch is most of the recovery pause (docs/spot.md). Rank 0 reports these
parts in its `started` event (`startup_<part>_s` metrics), and the agent writes them to the run's
log. Rank 0's parts include its waits for the other ranks: a replacement that tokenizes the data on
the critical path shows as rank 0's `features`, and a slow rank's start as its `process_group` (joining
the process group waits for every rank).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

PREFIX = "startup_"
SUFFIX = "_s"
# In the order a built-in task passes them. Events carry metrics with sorted keys: this order is what
# puts them back.
PARTS = ("python", "libraries", "data", "torch", "process_group", "model", "features", "trainer", "eval_before",
         "held", "resume")
HELD = "held"  # a job started ahead waits for its release: not startup, but the old job's last steps


def process_started() -> float | None:
    """When this process began, in epoch seconds (to 1/CLK_TCK), or None where /proc does not say."""
    try:
        with open("/proc/self/stat") as handle:
            # The command name (field 2) may hold spaces; the fields after it start at field 3.
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        ticks = int(fields[19])  # field 22: starttime, in clock ticks after boot
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class StartupClock:
    began: float = field(default_factory=time.time)
    process: float | None = field(default_factory=process_started)
    marks: list[tuple[str, float]] = field(default_factory=list)

    def mark(self, part: str) -> None:
        """`part` (one of PARTS) ended now; it began where the previous one ended."""
        if part not in PARTS:
            raise ValueError(f"unknown startup part {part!r}")
        self.marks.append((part, time.time()))

    def parts(self) -> dict[str, float | None]:
        """Seconds per part, as event metrics: `python` is the interpreter's start up to the clock."""
        found: dict[str, float | None] = {}
        if self.process is not None and self.process <= self.began:
            found[f"{PREFIX}python{SUFFIX}"] = round(self.began - self.process, 3)
        previous = self.began
        for part, at in self.marks:
            found[f"{PREFIX}{part}{SUFFIX}"] = round(at - previous, 3)
            previous = at
        return found


def read_parts(metrics: dict[str, float | None]) -> dict[str, float]:
    """The parts a `started` event's metrics hold, in PARTS order (others are not startup parts)."""
    return {part: float(value) for part in PARTS
            if isinstance(value := metrics.get(f"{PREFIX}{part}{SUFFIX}"), int | float)}


def describe(metrics: dict[str, float | None]) -> str:
    """`12.3s (python 0.4, libraries 3.1, ...)` from a `started` event's metrics; "" without parts. A job started
    ahead of its release says what came after the release first: that is the pause."""
    parts = read_parts(metrics)
    if not parts:
        return ""
    if HELD not in parts:
        return _listed(parts)
    names = list(parts)
    cut = names.index(HELD)
    before = {name: parts[name] for name in names[:cut]}
    after = {name: parts[name] for name in names[cut + 1:]}
    return (f"{_listed(after) if after else '0.0s'} after its release, having started {_listed(before)} ahead of it "
            f"and waited {parts[HELD]:.1f}s for it")


def _listed(parts: dict[str, float]) -> str:
    listed = ", ".join(f"{name.replace('_', ' ')} {seconds:.1f}" for name, seconds in parts.items())
    return f"{sum(parts.values()):.1f}s ({listed})"
