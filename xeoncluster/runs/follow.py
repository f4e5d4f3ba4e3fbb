"""Follow a run from the CLI: its log by byte offset, and its record, from the agent's host.

A dropped connection reconnects and goes on from the same offset, so no line is lost or shown twice.
Only whole lines are shown; a line still being written waits for its end.
"""
from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from xeoncluster import untrusted
from xeoncluster.errors import TrainingError, XeonClusterError
from xeoncluster.runs.client import agent_alive, run_folder
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


@dataclass(frozen=True)
class Chunk:
    record: RunRecord | None
    lines: list[str]
    consumed: int  # bytes of whole lines read


def read_chunk(host: AgentHost, cluster: str, run: str, offset: int) -> Chunk:
    folder = run_folder(host, cluster, run)
    command = (f"cat {shlex.quote(folder.file(folder.RECORD))} 2>/dev/null; printf '\\036'; "
               f"tail -c +{int(offset) + 1} {shlex.quote(folder.file(folder.LOG))} 2>/dev/null | head -c {CHUNK_BYTES}")
    result = host.run(command)
    head, _, text = result.stdout.partition("\x1e")
    try:
        record: RunRecord | None = RunRecord.model_validate_json(head)
    except ValueError:
        record = None
    whole = text[:text.rfind("\n") + 1] if "\n" in text else ""
    return Chunk(record, whole.splitlines(), len(whole.encode()))


class Follower:
    """`connect()` gives a host on a fresh connection (after a drop, a new one is made)."""

    def __init__(self, connect: Callable[[], AgentHost], cluster: str, run: str, echo: Callable[[str], None],
                 say: Callable[[str], None], offset: int = 0) -> None:
        self.connect, self.cluster, self.run = connect, cluster, run
        self.echo, self.say = echo, say
        self.offset = offset
        self.host: AgentHost | None = None
        self.seen = False

    def follow(self, to_the_end: bool = True) -> RunRecord:
        polls = 0
        while True:
            chunk = self._read()
            for line in chunk.lines:
                self.echo(line)
            self.offset += chunk.consumed
            record = chunk.record
            if record is None:
                raise self._gone()
            untrusted.same_run(record.run, self.run, "the run record on the agent's host")
            checked(record, "the run record on the agent's host")
            self.seen = True
            if chunk.consumed == 0 and (record.state.finished or not to_the_end):
                return record
            polls += 1
            if chunk.consumed == 0 and polls % ALIVE_EVERY == 0:
                self._check_alive(record)
            if chunk.consumed < CHUNK_BYTES:
                time.sleep(POLL_SECONDS)

    def _gone(self) -> TrainingError:
        gone = " any more: the cluster was removed while it ran" if self.seen else ""
        return TrainingError(f"no run '{self.run}' on cluster '{self.cluster}'{gone}")

    def _read(self) -> Chunk:
        for delay in (*RECONNECT_DELAYS, None):
            try:
                if self.host is None:
                    self.host = self.connect()
                return read_chunk(self.host, self.cluster, self.run, self.offset)
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
