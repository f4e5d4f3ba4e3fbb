"""The master's side of a takeover (agent/takeover.py), kept by its watch agent at every heartbeat: the
master lease in storage renewed in its name, and the agent's folder copied to every worker. A master
that finds the lease taken by another node has been replaced: its watch agent stops acting."""
from __future__ import annotations

from xeoncluster.agent.replica import Replica
from xeoncluster.cluster.master_lease import STALE_SECONDS, LeaseBook
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.providers.node_kinds import Node


class Fenced(XeonClusterError):
    """Another node holds the master lease: this one must stop acting as the master."""


class Succession:
    def __init__(self, replica: Replica, book: LeaseBook | None) -> None:
        self.replica, self.book = replica, book

    def keep(self, nodes: list[Node], reached: set[str], now: float) -> list[str]:
        """Renew the lease (Fenced if another node holds it), then copy the folder to the workers
        `reached`; the names of those it did not reach."""
        master = next((n for n in nodes if n.is_master), None)
        if master is None:
            return []
        if self.book is not None and self.book.take(master.id, master.name, now, STALE_SECONDS) is None:
            holder = self.book.current()
            raise Fenced(f"{holder.holder_name if holder else 'another node'} holds the master lease now")
        return self.replica.copy([n for n in nodes if not n.is_master and n.name in reached])
