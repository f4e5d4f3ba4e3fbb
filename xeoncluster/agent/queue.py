"""The cluster's run queue, as each run's agent sees it. Runs start one at a time, in the order `train`
submitted them, each once every run before it has ended, in any state.

There is no queue process and no queue file: the run records in the cluster's runs folder are the
queue. Every submitted run has its own agent from the start, which waits its turn; a lock beside the
records makes taking a turn atomic. So the queue survives the CLI's death and any agent's restart,
and an agent that died while it waited holds up nobody. While `up` repairs the cluster it holds the
queue with a lease (agent/repair_lease.py): no run takes its turn until the lease ends or runs out.
"""
from __future__ import annotations

import fcntl
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from xeoncluster.agent import repair_lease
from xeoncluster.agent.repair_lease import RepairLease
from xeoncluster.runs.queue_order import line_up, order
from xeoncluster.runs.record import RunRecord, RunState
from xeoncluster.wire.contract import AGENT_PATTERN
from xeoncluster.wire.layout import RunFolder

LOCK = "queue.lock"
# A record `train` wrote whose agent has not taken it yet holds its place this long: a `train` that died
# between writing it and starting the agent must not hold up the queue for good.
SUBMITTED_GRACE_SECONDS = 120.0


def agent_alive_here(pid: int | None) -> bool:
    """Whether `pid` is one of our agents on this host (a recorded pid may have been reused since)."""
    if pid is None:
        return False
    try:
        argv = Path(f"/proc/{int(pid)}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return re.search(AGENT_PATTERN, argv) is not None


@dataclass(frozen=True)
class Turn:
    """What a run's try at its turn found: the runs ahead of it, or a repair holding the queue."""

    ahead: list[RunRecord] = field(default_factory=list)
    repair: RepairLease | None = None

    @property
    def taken(self) -> bool:
        return not self.ahead and self.repair is None


@dataclass(frozen=True)
class Queue:
    runs: Path  # the cluster's runs folder on the agent's host
    alive: Callable[[int | None], bool] = agent_alive_here
    clock: Callable[[], float] = time.time

    def records(self) -> list[RunRecord]:
        found = []
        for path in sorted(self.runs.glob(f"*/{RunFolder.RECORD}")):
            try:
                found.append(RunRecord.model_validate_json(path.read_text()))
            except (OSError, ValueError):
                continue
        return found

    def pending(self, record: RunRecord) -> bool:
        """Still to end, with an agent that will end it (or one about to be started)."""
        if record.state.finished:
            return False
        if record.state is RunState.SUBMITTED and record.agent_pid is None:
            return self.clock() - record.submitted_at < SUBMITTED_GRACE_SECONDS
        return self.alive(record.agent_pid)

    def ahead_of(self, run: str) -> list[RunRecord]:
        """The runs that must end before `run` starts, in the order they go."""
        records = self.records()
        mine = [r for r in records if r.run == run]
        line = line_up([r for r in records if r.run != run], self.pending)
        return [r for r in line if not r.waiting or (bool(mine) and order(r) < order(mine[0]))]

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.runs.mkdir(parents=True, exist_ok=True)
        with open(self.runs / LOCK, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def take_turn(self, run: str, start: Callable[[], None]) -> Turn:
        """`start()` (which marks the run started) when nothing is ahead of `run` and no repair holds
        the queue; else what stood in the way."""
        with self.locked():
            turn = Turn(self.ahead_of(run), repair_lease.current(self.runs, self.clock()))
            if turn.taken:
                start()
            return turn

    def hold(self, holder: str, seconds: float) -> RepairLease:
        """Take or renew `holder`'s lease; the one in force when another holds it (then nothing changes)."""
        with self.locked():
            now = self.clock()
            held = repair_lease.current(self.runs, now)
            if held is not None and held.holder != holder:
                return held
            lease = RepairLease(holder=holder, expires_at=now + seconds)
            repair_lease.write(self.runs, lease)
            return lease

    def release(self, holder: str) -> None:
        with self.locked():
            repair_lease.remove(self.runs, holder, self.clock())
