"""What a node is and where it stands, as values: each one's string is what state.json, the provider's
tags and every other wire format hold, so a StrEnum reads and writes them unchanged."""
from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    MASTER = "master"
    WORKER = "worker"


class Market(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"
    PLANNED = ""  # a node `plan` imagines for a cluster that does not exist: no market chosen yet


class NodeState(StrEnum):
    """EC2's instance states (the local provider uses two of them), and what is said when none is known."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SHUTTING_DOWN = "shutting-down"
    TERMINATED = "terminated"
    UNKNOWN = "unknown"

    def is_live(self) -> bool:
        """The machine still exists and holds its disk: it may run again."""
        return self in (NodeState.PENDING, NodeState.RUNNING, NodeState.STOPPING, NodeState.STOPPED)

    def is_terminal(self) -> bool:
        """The machine is going or gone for good."""
        return self in (NodeState.SHUTTING_DOWN, NodeState.TERMINATED)

    def is_running(self) -> bool:
        return self is NodeState.RUNNING
