"""The typed events a run's ranks report, and the one place that writes and reads them.

Ranks print each event as one marked line on stdout. Under mpiexec every rank's stdout reaches the
master, so the run agent sees the events of every node in order with the log, keeps them in the
run's `events.jsonl`, and decides from them (never from the human-readable lines). This module has
no dependency beyond the standard library: the CLI machine imports it without torch.

The same stdout carries whatever the job prints: a user's script, a library, a line of the data. So a
marked line is an event only when it carries the HMAC of its JSON under the launch's own key
(XC_EVENT_KEY, which the agent draws for each launch and hands the ranks through mpiexec's
environment): a printed copy of an event, or one made up, is a log line like any other. The key is in
the ranks' environment, so code that sets out to forge an event can; no printed line can.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, get_args

# A run that stopped on a notice or a stop request exits with this code once its checkpoint is saved.
EXIT_STOPPED = 75
MARKER = "@xc-event "
EVENTS_FILE = "events.jsonl"
EVENT_KEY_ENV = "XC_EVENT_KEY"  # the launch's key (hex), in every rank's environment

# The version of the CLI-agent contract (xeoncluster/wire/contract.py takes it from here: this package
# imports nothing above it). Events without one were printed by ranks before 0.2: version 1.
EVENTS_VERSION = 2
# `[3] @xc-event MAC {...}`: the rank label is added by xeoncluster/node/events/labels.py when the world is
# larger than one; MAC is the HMAC-SHA256 of the JSON under the launch's key.
_LINE = re.compile(r"^(?:\[(\d+)\] )?" + re.escape(MARKER) + r"([0-9a-f]{64}) (\{.*\})\s*$")


@dataclass(frozen=True, kw_only=True)
class _Event:
    """What every event carries. Each kind is a class of its own below, its `kind` written there once;
    a line's kind picks its class (EVENT_TYPES), as a discriminated union would. Plain dataclasses, not
    pydantic: the ranks import this module where only the node's stack is installed."""

    time: float = field(default_factory=time.time)
    rank: int = 0
    node: str = ""          # the rank's address towards the master (what the provider calls private_ip)
    version: int = EVENTS_VERSION

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v not in (None, "", (), {}) or k in ("kind", "time")}
        if "lines" in data:
            data["lines"] = list(data["lines"])
        return json.dumps(data, sort_keys=True)


@dataclass(frozen=True, kw_only=True)
class Progress(_Event):
    """An event at a step of the run."""

    step: int | None = None
    total: int | None = None


@dataclass(frozen=True, kw_only=True)
class _Measured(Progress):
    """An event with numbers: the startup clock's parts (started), scores (eval, finished)."""

    metrics: dict[str, float | None] = field(default_factory=dict)


PARAMETERS = "parameters"  # a started event's metric: the model's parameters whose gradients DDP all-reduces


@dataclass(frozen=True, kw_only=True)
class StartedEvent(_Measured):
    kind: Literal["started"] = field(default="started", init=False)


@dataclass(frozen=True, kw_only=True)
class ReadyEvent(_Measured):
    """Every rank's, at its first step: where its start went (the startup clock's parts). Rank 0's started
    event carries its own too; the others' say which rank rank 0 waited for, and on what."""

    kind: Literal["ready"] = field(default="ready", init=False)


@dataclass(frozen=True, kw_only=True)
class HeldEvent(Progress):
    """Rank 0's, once every rank of a job started ahead (XC_HOLD_FILE) is ready and waits for its release."""

    kind: Literal["held"] = field(default="held", init=False)


@dataclass(frozen=True, kw_only=True)
class StepEvent(Progress):
    kind: Literal["step"] = field(default="step", init=False)
    loss: float | None = None


@dataclass(frozen=True, kw_only=True)
class EvalEvent(_Measured):
    kind: Literal["eval"] = field(default="eval", init=False)


@dataclass(frozen=True, kw_only=True)
class CheckpointEvent(Progress):
    kind: Literal["checkpoint"] = field(default="checkpoint", init=False)


@dataclass(frozen=True, kw_only=True)
class StoppedEvent(Progress):
    kind: Literal["stopped"] = field(default="stopped", init=False)
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class FinishedEvent(_Measured):
    kind: Literal["finished"] = field(default="finished", init=False)


@dataclass(frozen=True, kw_only=True)
class NoticeEvent(_Event):
    kind: Literal["notice"] = field(default="notice", init=False)
    reason: str = ""
    deadline: float | None = None  # when the node goes away (epoch seconds), if announced


@dataclass(frozen=True, kw_only=True)
class FailedEvent(_Event):
    kind: Literal["failed"] = field(default="failed", init=False)
    reason: str = ""
    lines: tuple[str, ...] = ()    # the last lines of the error


RunEvent = (StartedEvent | ReadyEvent | HeldEvent | StepEvent | EvalEvent | CheckpointEvent | StoppedEvent
            | FinishedEvent | NoticeEvent | FailedEvent)
# kind -> its class, read from the classes: each kind's literal is written once, in its class
EVENT_TYPES: dict[str, type[RunEvent]] = {cls.__dataclass_fields__["kind"].default: cls for cls in get_args(RunEvent)}


def event_from_dict(data: dict[str, Any]) -> RunEvent:
    """The event of its kind's class; fields its kind does not carry are dropped, as unknown ones are."""
    kind = data.get("kind")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event kind {data.get('kind')!r}")
    known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and cls.__dataclass_fields__[k].init}
    if "lines" in known:
        known["lines"] = tuple(known["lines"])
    known.setdefault("version", 1)  # events without one were printed by ranks before 0.2
    return cls(**known)


def event_from_json(text: str) -> RunEvent:
    return event_from_dict(json.loads(text))


def signature(key: str, text: str) -> str:
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def event_line(event: RunEvent, key: str) -> str:
    text = event.to_json()
    return f"{MARKER}{signature(key, text)} {text}"


def emit(event: RunEvent) -> None:
    """Print the event as one marked line (flushed at once: the agent acts on notices within a step). Read on
    each call: the launch's key is in the environment mpiexec gave this rank."""
    print(event_line(event, os.environ.get(EVENT_KEY_ENV, "")), flush=True)


def parse_line(line: str, key: str) -> RunEvent | None:
    """The event a stream line carries under the launch's `key`, or None for an ordinary log line: one
    with no marker, a garbled one, or one whose signature is not the key's (printed by anything else)."""
    match = _LINE.match(line)
    if match is None or not key or not hmac.compare_digest(match.group(2), signature(key, match.group(3))):
        return None
    try:
        event = event_from_json(match.group(3))
    except (ValueError, TypeError):
        return None
    return event if match.group(1) is None else _with_rank(event, int(match.group(1)))


def _with_rank(event: RunEvent, rank: int) -> RunEvent:
    return replace(event, rank=rank)


def read_events(text: str) -> list[RunEvent]:
    """Events from an events.jsonl text; a line cut short by a crash is skipped."""
    events = []
    for line in text.splitlines():
        try:
            events.append(event_from_json(line))
        except (ValueError, TypeError):
            continue
    return events
