"""When a cluster removes itself: after `idle_minutes` with no active run and nobody logged in over SSH,
or at its `max_hours` deadline or its `max_cost` ceiling whatever runs. The CLI writes these settings
where the cluster's watch agent reads them (autostop.json); the agent writes what it sees (watch.json)
for `status`."""
from __future__ import annotations

import time

from pydantic import BaseModel

from xeoncluster.cluster.untrusted import Amount, Pid, Timestamp

SETTINGS = "autostop.json"
STATUS = "watch.json"


def clock_time(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def minutes(value: float) -> str:
    return f"{value:g} idle minute{'' if value == 1 else 's'}"


class AutoStop(BaseModel):
    idle_minutes: Amount
    max_hours: Amount | None = None
    created_at: Timestamp  # the cluster's: where max_hours counts from
    # The nodes' dead-man switch (xeoncluster/node/orphan_watch.py), fed by the watch agent's heartbeats;
    # None where the provider's nodes cannot power themselves off (they bill nothing).
    orphan_minutes: Amount | None = None
    max_cost: Amount | None = None  # USD the cluster's nodes may cost (agent/cluster_spend.py); None: no ceiling

    @property
    def off(self) -> bool:
        """Nothing for the watch agent to do: it ends (with the switch on, it stays to send heartbeats)."""
        return not self.removes_itself and not self.orphan_minutes

    @property
    def removes_itself(self) -> bool:
        return bool(self.idle_minutes or self.max_hours or self.max_cost)

    @property
    def deadline(self) -> float | None:
        return self.created_at + self.max_hours * 3600 if self.max_hours else None

    def due(self, now: float, idle_since: float, active: bool, spent: float | None = None) -> tuple[str, str] | None:
        """(by, detail) when the cluster must go now: ("deadline", ...), ("cost", ...) or ("idle", ...); else
        None. `spent`: what its nodes have cost so far, None where unknown."""
        if self.deadline is not None and now >= self.deadline:
            return "deadline", f"at its max_hours deadline ({self.max_hours:g} h)"
        if self.max_cost and spent is not None and spent >= self.max_cost:
            return "cost", f"at its max_cost ceiling (${spent:.4g} spent of ${self.max_cost:g})"
        if self.idle_minutes and not active and now - idle_since >= self.idle_minutes * 60:
            return "idle", f"after {minutes(self.idle_minutes)}"
        return None

    def describe(self) -> str:
        """For `up` and `status`: when the cluster will remove itself."""
        orphans = f"; a node that hears from no agent for {self.orphan_minutes:g} minutes (no run on it, nobody " \
            "logged in) powers itself off" if self.orphan_minutes else ""
        if not self.removes_itself:
            return "the cluster does not remove itself (idle_minutes: 0, no max_hours, no max_cost); `down` removes " \
                "it" + orphans
        parts = [f"after {minutes(self.idle_minutes)} (no run, nobody logged in over SSH)"] if self.idle_minutes \
            else []
        if self.deadline is not None:
            parts.append(f"at {clock_time(self.deadline)} whatever runs (max_hours {self.max_hours:g})")
        if self.max_cost:
            parts.append(f"once its nodes have cost ${self.max_cost:g} whatever runs (max_cost)")
        return "the cluster removes itself " + ", or ".join(parts) + orphans


class WatchStatus(BaseModel):
    """What the watch agent saw at its last check."""

    state: str                  # "watching", "removing" or "off"
    checked_at: Timestamp
    idle_since: Timestamp
    busy: str = ""              # why the cluster is not idle: "run r1 is running", "an SSH session on node1"
    pid: Pid | None = None
    spent_usd: Amount | None = None  # what the nodes have cost so far, where a max_cost ceiling is watched

    def describe(self, settings: AutoStop, now: float) -> str:
        if self.state == "removing":
            return "removing itself now"
        spent = f"; ${self.spent_usd:.2f} of its max_cost spent" if self.spent_usd is not None else ""
        if self.busy:
            return f"not idle: {self.busy}{spent}"
        idle = (now - self.idle_since) / 60
        if not settings.idle_minutes:
            return f"idle for {idle:.0f} min{spent}"
        at = self.idle_since + settings.idle_minutes * 60
        return f"idle for {idle:.0f} min; removes itself at {clock_time(at)} unless a run starts or someone logs " \
               f"in{spent}"
