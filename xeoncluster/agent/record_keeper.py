"""The run's record as its agent changes it: one typed change per thing that happens, saved at once.

run.json stays the flat record every CLI and agent version reads (runs/record.py, wire/contract.py);
the changes are grouped here by what they are about (what happened to the run, what it costs and
keeps, what it does now) instead of going through a `**changes` catch-all that any key could pass
and mypy could not check.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from xeoncluster.runs.record import Growth, Live, NodeUse, RankStartup, Restart, RunFiles, RunRecord, RunState


class RecordKeeper:
    def __init__(self, files: RunFiles, record: RunRecord) -> None:
        self.files, self.record = files, record
        self._lock = threading.Lock()  # the events, the watches and the loop change it from their threads
        self._cost_clock = time.time()

    @contextmanager
    def _change(self) -> Iterator[RunRecord]:
        """Every change carries the cost up to now: the record's cost is never older than its news."""
        with self._lock:
            now = time.time()
            self.record.cost_usd += self.record.usd_per_hour * (now - self._cost_clock) / 3600
            self._cost_clock = now
            yield self.record
            self.files.save(self.record)

    # -- what happened: the run's lifecycle ---------------------------------------------------
    def queued(self) -> None:
        with self._change() as record:
            record.state, record.agent_pid = RunState.QUEUED, os.getpid()

    def started(self, storage: str) -> None:
        with self._change() as record:
            # A run a new master carries on keeps the start its first agent gave it.
            record.state, record.agent_pid = RunState.STARTING, os.getpid()
            record.started_at = record.started_at or time.time()
            record.storage = storage

    def running(self, nodes: list[str], world: int, size: int) -> None:
        """`world`: the launch's ranks, which the global batch is set for at the first; `size`: the cluster's."""
        with self._change() as record:
            record.state, record.nodes, record.size = RunState.RUNNING, nodes, size
            record.batch_world = record.batch_world or world
            record.startup = []  # a new launch: its ranks report their start afresh

    def rank_ready(self, startup: RankStartup) -> None:
        with self._change() as record:
            record.startup = sorted([*(r for r in record.startup if r.rank != startup.rank), startup],
                                    key=lambda r: r.rank)

    def grew(self, growth: Growth) -> None:
        with self._change() as record:
            record.growths = [*record.growths, growth]

    def noticed(self, node: str) -> None:
        with self._change() as record:
            record.notices = sorted({*record.notices, node})

    def recovering(self) -> None:
        with self._change() as record:
            record.state = RunState.RECOVERING

    def stalled(self) -> None:
        with self._change() as record:
            record.stalls += 1

    def restarted(self, restart: Restart) -> None:
        with self._change() as record:
            record.restarts = [*record.restarts, restart]

    def prepared(self, seconds: float) -> None:
        """How long the newest restart's relaunch took to prepare."""
        with self._change() as record:
            *earlier, last = record.restarts
            record.restarts = [*earlier, last.model_copy(update={"prepare_seconds": seconds})]

    def ending(self) -> None:
        """The end's time, before the results are stored: metrics.json carries the cost up to it."""
        with self._change() as record:
            record.ended_at = time.time()

    def ended(self, state: RunState, exit_code: int, error: str, durable_step: int | None) -> None:
        with self._change() as record:
            record.state, record.exit_code, record.error = state, exit_code, error
            record.durable_step = durable_step

    def cancelled_unstarted(self) -> None:
        with self._change() as record:
            record.state, record.exit_code, record.error = RunState.CANCELLED, 130, "cancelled before it started"
            record.ended_at, record.agent_pid = time.time(), os.getpid()

    # -- what it costs and keeps --------------------------------------------------------------
    def cost_now(self, now: float) -> float:
        """The cost up to `now`, between two changes of the record."""
        with self._lock:
            return self.record.cost_usd + self.record.usd_per_hour * max(0.0, now - self._cost_clock) / 3600

    def priced(self, usd_per_hour: float) -> None:
        with self._change() as record:
            record.usd_per_hour = usd_per_hour

    def stored(self, durable_step: int | None) -> None:
        with self._change() as record:
            record.durable_step = durable_step

    def storage_failed(self, error: str) -> None:
        with self._change() as record:
            record.storage_error = error

    # -- what is live: pace and use -----------------------------------------------------------
    def progress(self, step: int, total: int | None, live: Live) -> None:
        with self._change() as record:
            record.step, record.total_steps, record.live = step, total, live

    def used(self, usage: dict[str, NodeUse], live: Live) -> None:
        with self._change() as record:
            record.usage, record.live = usage, live
