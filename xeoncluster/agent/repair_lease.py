"""A repair's hold on the cluster's queue: while `up` repairs the cluster (replaces nodes, writes
~/hosts again), no queued run starts on it, and a repair does not begin under a run that started.

The hold is a lease, not the queue's flock held over SSH. A repair is many SSH commands; a flock held
by one long remote command would be released by a laptop that crashed or lost its network only when
sshd notices the dead connection, which TCP keepalive puts off for hours, and the queue would stand
still all that time. A lease is a file beside the queue's lock, written and read under that lock,
naming its holder and when it expires by this host's clock (the only clock it reads): `up` renews it
while it works and removes it when it is done; one that crashed leaves a lease that runs out on its
own, and the queue goes on.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ValidationError

from xeoncluster.cluster.state import atomic_write

LEASE = "repair.lease"


class RepairLease(BaseModel):
    holder: str
    expires_at: float  # this host's time.time()


def current(runs: Path, now: float) -> RepairLease | None:
    """The lease in force, if any: an expired or unreadable one holds nothing."""
    try:
        lease = RepairLease.model_validate_json((runs / LEASE).read_text())
    except (OSError, ValidationError):
        return None
    return lease if lease.expires_at > now else None


def write(runs: Path, lease: RepairLease) -> None:
    atomic_write(runs / LEASE, lease.model_dump_json())


def remove(runs: Path, holder: str, now: float) -> None:
    """The holder's own lease only: one that expired and was taken by another stays."""
    lease = current(runs, now)
    if lease is not None and lease.holder == holder:
        (runs / LEASE).unlink(missing_ok=True)
