"""`python -m xeoncluster.agent watch CLUSTER`: the cluster's watch agent. It lives where the run agents
do (the master on a cloud, this machine for local nodes), checks every TICK_SECONDS whether the cluster
is idle, and removes it after `idle_minutes` of idleness, at its `max_hours` deadline, or once its nodes
have cost its `max_cost` (agent/cluster_spend.py).

Its settings are re-read at every check, so `up --idle-minutes N` changes them in place; with both off
it ends. One watch agent per cluster: a second one started meanwhile finds the lock taken and ends.
"""
from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

from xeoncluster.agent.activity import Activity
from xeoncluster.agent.heartbeat import Heartbeat
from xeoncluster.agent.self_removal import SelfRemoval
from xeoncluster.agent.succession import Fenced
from xeoncluster.cluster.autostop import SETTINGS, STATUS, AutoStop, WatchStatus
from xeoncluster.cluster.state import atomic_write
from xeoncluster.core.errors import XeonClusterError

TICK_SECONDS = 15.0


class Watcher:
    def __init__(self, folder: Path, activity: Activity, removal: SelfRemoval, report: Callable[[str], None],
                 heartbeat: Heartbeat | None = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, spend: Callable[[float, float], float] | None = None
                 ) -> None:
        self.folder, self.activity, self.removal, self.report = folder, activity, removal, report
        self.heartbeat, self.clock, self.sleep, self.spend = heartbeat, clock, sleep, spend
        self.idle_since = clock()

    def run(self) -> int:
        with open(self.folder / "watch.lock", "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.report("another watch agent watches this cluster")
                return 0
            while self.check():
                self.sleep(TICK_SECONDS)
        return 0

    def check(self) -> bool:
        """One look at the cluster; False once the agent is done (settings off, or the cluster removed)."""
        settings = self.settings()
        if settings is None or settings.off:
            self.write("off", "")
            return False
        if not self.beat(settings):
            self.write("fenced", "another node is the master now")
            return False
        busy = self.busy()
        now = self.clock()
        if busy:
            self.idle_since = now
        spent = self.spent(settings, now)
        due = settings.due(now, self.idle_since, bool(busy), spent)
        if due is None:
            self.write("watching", busy, spent)
            return True
        self.write("removing", busy, spent)
        try:
            self.removal.remove(*due)
        except Exception as exc:  # noqa: BLE001 - e.g. a `train` took the cluster's lock meanwhile: look again
            why = exc.one_line() if isinstance(exc, XeonClusterError) else f"{type(exc).__name__}: {exc}"
            self.report(f"removal put off: {why}")
            self.write("watching", f"the last removal failed: {why}")
            return True
        return False

    def beat(self, settings: AutoStop) -> bool:
        """False once this master has been replaced (another node holds the master lease)."""
        if self.heartbeat is None:
            return True
        try:
            self.heartbeat.beat(settings, self.clock())
        except Fenced as exc:
            self.report(f"{exc.message}: this agent stops")
            return False
        except Exception as exc:  # noqa: BLE001 - a missed beat is retried at the next one; the switch waits minutes
            self.report(f"heartbeat failed ({type(exc).__name__}: {exc})")
        return True

    def spent(self, settings: AutoStop, now: float) -> float | None:
        if not settings.max_cost or self.spend is None:
            return None
        try:
            return self.spend(now, settings.created_at)
        except Exception as exc:  # noqa: BLE001 - an unknown cost is not a spent one: never remove on a failed check
            self.report(f"could not price the cluster's nodes ({type(exc).__name__}: {exc})")
            return None

    def busy(self) -> str:
        try:
            return self.activity.busy()
        except Exception as exc:  # noqa: BLE001 - unsure is not idle: never remove a cluster on a failed check
            self.report(f"could not check the cluster's activity ({type(exc).__name__}: {exc})")
            return "its activity could not be checked"

    def settings(self) -> AutoStop | None:
        try:
            return AutoStop.model_validate_json((self.folder / SETTINGS).read_text())
        except (OSError, ValueError):
            return None

    def write(self, state: str, busy: str, spent: float | None = None) -> None:
        status = WatchStatus(state=state, checked_at=self.clock(), idle_since=self.idle_since, busy=busy,
                             pid=os.getpid(), spent_usd=spent)
        if self.folder.exists():
            atomic_write(self.folder / STATUS, status.model_dump_json(indent=1))
