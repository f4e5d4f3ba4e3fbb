"""Training ranks that have run a while go to a lower CPU priority, for the tests that boot machines.

On a real cluster a replacement's boot, an agent's watch and a launch's imports have CPUs of their own.
Here every local node and stand-in container shares this machine's two cores with every rank of both
chains, so a swap's boot waited behind the ranks it was meant to relieve while those ranks trained on:
scenarios that train while something else happens (a boot, a swap, an outage) then trained longer for
nothing. A rank starts at the usual priority (its imports and its data are part of a launch's pace) and
goes to nice 10 once it is past its start, to train on whatever CPU the rest leaves.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

NICE = 10
PAST_START_SECONDS = 30.0
SCAN_SECONDS = 1.0
PROC = Path("/proc")
HZ = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Process:
    pid: int
    started: int  # clock ticks after boot: a pid reused by another process is another Process

    def tasks(self) -> list[int]:
        try:
            return [int(t.name) for t in (PROC / str(self.pid) / "task").iterdir()]
        except OSError:
            return []


def started_at(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_rank(pid: int) -> bool:
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return "-m" in [a.decode(errors="replace") for a in argv[1:3]] and b"xeoncluster.node" in argv


def uptime() -> float:
    return float((PROC / "uptime").read_text().split()[0])


@dataclass
class RankPriority:
    """Scans /proc every second; each rank is looked at until it is past its start, then reniced once."""

    seen: set[Process] = field(default_factory=set)
    pending: set[Process] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)

    def scan(self) -> None:
        for entry in PROC.iterdir():
            started = started_at(int(entry.name)) if entry.name.isdigit() else None
            if started is None or Process(int(entry.name), started) in self.seen:
                continue
            process = Process(int(entry.name), started)
            self.seen.add(process)
            if is_rank(process.pid):
                self.pending.add(process)
        now = uptime()
        for process in [p for p in self.pending if now - p.started / HZ >= PAST_START_SECONDS]:
            self.pending.discard(process)
            lower(process)

    def run(self) -> None:
        while not self.stop.wait(SCAN_SECONDS):
            self.scan()


def lower(process: Process) -> None:
    for task in process.tasks():
        with contextlib.suppress(OSError):  # gone meanwhile
            os.setpriority(os.PRIO_PROCESS, task, NICE)


def start() -> RankPriority:
    priority = RankPriority()
    threading.Thread(target=priority.run, name="rank-priority", daemon=True).start()
    return priority
