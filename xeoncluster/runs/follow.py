"""Follow a run from the CLI: its log by byte offset, and its record, from the agent's host.

A dropped connection reconnects and goes on from the same offset, so no line is lost or shown twice.
Offsets count bytes of the files (the log crosses as base64, whatever its bytes). Only whole lines are
shown, decoded with replacement and made inert (runs/display.py); a line still being written waits for
its end, and a line longer than CHUNK_BYTES is shown in pieces of that size.
"""
from __future__ import annotations

import base64
import codecs
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from xeoncluster.cluster import untrusted
from xeoncluster.core.errors import TrainingError, XeonClusterError
from xeoncluster.node.events.events import RunEvent, read_events
from xeoncluster.runs.client import agent_alive, run_folder
from xeoncluster.runs.display import inert
from xeoncluster.runs.host import AgentHost
from xeoncluster.runs.record import RunRecord
from xeoncluster.runs.record_checks import checked

CHUNK_BYTES = 1 << 20
POLL_SECONDS = 1.0
# Check that the agent is alive every this many polls of a run that is not finished.
ALIVE_EVERY = 10
RECONNECT_DELAYS = (1, 2, 4, 8, 15, 30)
# `down --force` stops a run's agent first and removes the run's folder after it has stopped the nodes:
# an agent found dead is given this long to turn out to be that, before it counts as having crashed.
REMOVAL_GRACE_SECONDS = 30.0
LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Chunk:
    record: RunRecord | None
    lines: list[str]           # inert, decoded with replacement
    consumed: int              # bytes of the log read: whole lines, or a piece of a line over CHUNK_BYTES
    events: list[RunEvent] = field(default_factory=list)
    events_consumed: int = 0   # bytes of whole lines of events.jsonl read


def _tail(path: str, offset: int) -> str:
    # base64: the log is the ranks' bytes, whatever they are; the host's run() gives text, and a byte
    # decoded there with replacement would no longer count as one byte of the offset.
    return (f"tail -c +{int(offset) + 1} {shlex.quote(path)} 2>/dev/null | head -c {CHUNK_BYTES} | base64 -w0; "
            "printf '\\036'")


def read_chunk(host: AgentHost, cluster: str, run: str, offset: int, events_offset: int | None = None) -> Chunk:
    """The record, the log from `offset` and, unless `events_offset` is None, the events from theirs:
    one command, so what the record says has happened is in the log read with it."""
    folder = run_folder(host, cluster, run)
    command = f"cat {shlex.quote(folder.file(folder.RECORD))} 2>/dev/null; printf '\\036'; " + \
        _tail(folder.file(folder.LOG), offset)
    if events_offset is not None:
        command += "; " + _tail(folder.file(folder.EVENTS), events_offset)
    head, _, rest = host.run(command).stdout.partition("\x1e")
    log, _, events = rest.partition("\x1e")
    try:
        record: RunRecord | None = RunRecord.model_validate_json(head)
    except ValueError:
        record = None
    lines, consumed = log_lines(_decoded(log))
    found, events_consumed = step_events(_decoded(events))
    return Chunk(record, lines, consumed, found, events_consumed)


def _decoded(part: str) -> bytes:
    try:
        return base64.b64decode(part.strip(), validate=True)
    except ValueError:
        return b""


def log_lines(data: bytes) -> tuple[list[str], int]:
    """The whole lines of `data` and the bytes they take. A full chunk without a newline is a piece of a
    line longer than CHUNK_BYTES: it is shown as a line of its own (cut where a character ends), or the
    follower would wait for its end forever."""
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) >= CHUNK_BYTES:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = decoder.decode(data)
        return [inert(text)], len(data) - len(decoder.getstate()[0])
    # A lone CR ends a line as it did on the ranks' terminal (tqdm redraws); no other separator does.
    lines = LINE_BREAK.split(data[:end].decode("utf-8", errors="replace"))[:-1]
    return [inert(line) for line in lines], end


def step_events(data: bytes) -> tuple[list[RunEvent], int]:
    """The events of the whole lines of `data` (a line that is no event is skipped) and the bytes they take.
    A full chunk without a newline is no event of ours: it is passed over."""
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) >= CHUNK_BYTES:
        return [], len(data)
    return read_events(data[:end].decode("utf-8", errors="replace")), end


class Follower:
    """`connect()` gives a host on a fresh connection (after a drop, a new one is made). `steps`, if given,
    is told the run's typed events as they come (what a progress bar shows), beside the log's lines."""

    def __init__(self, connect: Callable[[], AgentHost], cluster: str, run: str, echo: Callable[[str], None],
                 say: Callable[[str], None], offset: int = 0,
                 steps: Callable[[RunEvent], None] | None = None) -> None:
        self.connect, self.cluster, self.run = connect, cluster, run
        self.echo, self.say, self.steps = echo, say, steps
        self.offset = offset
        self.events_offset = 0
        self.host: AgentHost | None = None
        self.seen = False

    def follow(self, to_the_end: bool = True) -> RunRecord:
        polls = 0
        while True:
            chunk = self._read()
            self._show(chunk)
            record = chunk.record
            if record is None:
                raise self._gone()
            untrusted.same_run(record.run, self.run, "the run record on the agent's host")
            checked(record, "the run record on the agent's host")
            self.seen = True
            read = max(chunk.consumed, chunk.events_consumed)
            if read == 0 and (record.state.finished or not to_the_end):
                return record
            polls += 1
            if read == 0 and polls % ALIVE_EVERY == 0:
                self._check_alive(record)
            if read < CHUNK_BYTES:
                time.sleep(POLL_SECONDS)

    def _show(self, chunk: Chunk) -> None:
        for line in chunk.lines:
            self.echo(line)
        self.offset += chunk.consumed
        for event in chunk.events:
            if self.steps is not None:
                self.steps(event)
        self.events_offset += chunk.events_consumed

    def _gone(self) -> TrainingError:
        gone = " any more: the cluster was removed while it ran" if self.seen else ""
        return TrainingError(f"no run '{self.run}' on cluster '{self.cluster}'{gone}")

    def _read(self) -> Chunk:
        for delay in (*RECONNECT_DELAYS, None):
            try:
                if self.host is None:
                    self.host = self.connect()
                return read_chunk(self.host, self.cluster, self.run, self.offset,
                                  None if self.steps is None else self.events_offset)
            except XeonClusterError as exc:
                self.host = None
                if delay is None:
                    raise
                self.say(f"lost the connection to the run's agent ({exc.message}); reconnecting in {delay}s "
                         "(the run goes on)")
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _check_alive(self, record: RunRecord) -> None:
        assert self.host is not None
        if record.state.finished or agent_alive(self.host, record):
            return
        folder = run_folder(self.host, self.cluster, self.run)
        if self._removed_soon(folder.file(folder.RECORD)):
            raise self._gone()
        log = folder.file(folder.AGENT_LOG)
        last = self.host.run(f"tail -n 1 {shlex.quote(log)} 2>/dev/null").stdout.strip()
        raise TrainingError(f"the run agent of {self.run} on {self.host.name} stopped before the run ended"
                            + (f": {last}" if last else ""), hint=f"its log is {log} on {self.host.name}")

    def _removed_soon(self, record: str) -> bool:
        assert self.host is not None
        deadline = time.monotonic() + REMOVAL_GRACE_SECONDS
        while time.monotonic() < deadline:
            if not self.host.run(f"test -e {shlex.quote(record)}").ok:
                return True
            time.sleep(POLL_SECONDS)
        return False
