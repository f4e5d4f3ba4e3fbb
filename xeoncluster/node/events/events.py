"""The typed events a run's ranks report, and the one place that writes and reads them.

Ranks print each event as one marked line on stdout. Under mpiexec every rank's stdout reaches the
master, so the run agent sees the events of every node in order with the log, keeps them in the
run's `events.jsonl`, and decides from them (never from the human-readable lines). This module has
no dependency beyond the standard library: the CLI machine imports it without torch.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# A run that stopped on a notice or a stop request exits with this code once its checkpoint is saved.
EXIT_STOPPED = 75
MARKER = "@xc-event "
EVENTS_FILE = "events.jsonl"

Kind = Literal["started", "step", "eval", "checkpoint", "notice", "stopped", "finished", "failed"]
KINDS: tuple[str, ...] = ("started", "step", "eval", "checkpoint", "notice", "stopped", "finished", "failed")
# The version of the CLI-agent contract (xeoncluster/wire/contract.py takes it from here: this package
# imports nothing above it). Events without one were printed by ranks before 0.2: version 1.
EVENTS_VERSION = 2
# `[3] @xc-event {...}`: the rank label is added by xeoncluster/node/events/labels.py when the world is larger than one.
_LINE = re.compile(r"^(?:\[(\d+)\] )?" + re.escape(MARKER) + r"(\{.*\})\s*$")


@dataclass(frozen=True)
class RunEvent:
    """One thing that happened in a run. Fields that do not apply to a kind stay at their default."""

    kind: Kind
    time: float = field(default_factory=time.time)
    rank: int = 0
    node: str = ""          # the rank's address towards the master (what the provider calls private_ip)
    step: int | None = None
    total: int | None = None
    loss: float | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    reason: str = ""        # notice, stopped, failed: why
    deadline: float | None = None  # notice: when the node goes away (epoch seconds), if announced
    lines: tuple[str, ...] = ()    # failed: the last lines of the error
    version: int = EVENTS_VERSION

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v not in (None, "", (), {}) or k in ("kind", "time")}
        if "lines" in data:
            data["lines"] = list(self.lines)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunEvent:
        if data.get("kind") not in KINDS:
            raise ValueError(f"unknown event kind {data.get('kind')!r}")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["lines"] = tuple(known.get("lines", ()))
        known.setdefault("version", 1)
        return cls(**known)

    @classmethod
    def from_json(cls, text: str) -> RunEvent:
        return cls.from_dict(json.loads(text))


def emit(event: RunEvent) -> None:
    """Print the event as one marked line (flushed at once: the agent acts on notices within a step)."""
    print(MARKER + event.to_json(), flush=True)


def parse_line(line: str) -> RunEvent | None:
    """The event a stream line carries, or None for an ordinary log line (or a garbled marker line)."""
    match = _LINE.match(line)
    if match is None:
        return None
    try:
        event = RunEvent.from_json(match.group(2))
    except (ValueError, TypeError):
        return None
    return event if match.group(1) is None else _with_rank(event, int(match.group(1)))


def _with_rank(event: RunEvent, rank: int) -> RunEvent:
    data = asdict(event)
    data["rank"] = rank
    return RunEvent.from_dict(data)


def read_events(text: str) -> list[RunEvent]:
    """Events from an events.jsonl text; a line cut short by a crash is skipped."""
    events = []
    for line in text.splitlines():
        try:
            events.append(RunEvent.from_json(line))
        except (ValueError, TypeError):
            continue
    return events
