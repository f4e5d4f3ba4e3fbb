"""What a node is and where it stands, as values: each one's string is what state.json, the provider's
tags and every other wire format hold, so a StrEnum reads and writes them unchanged."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Node:
    name: str
    id: str
    private_ip: str
    ssh_host: str
    role: Role
    market: Market | str  # str: the provider's name, where nodes are bought on no market
    zone: str | None = None
    instance_type: str | None = None
    state: NodeState = NodeState.RUNNING
    price_per_hour: float | None = None
    owner: str | None = None  # the owner tag the provider shows (None where nothing is owned)
    launched_at: float | None = None  # epoch seconds, where the provider says when the machine started billing

    def __post_init__(self) -> None:
        # Nodes built from plain strings (the provider's tags, older callers) hold the enums all the same;
        # a role outside Role stays as written, for cluster/untrusted.py to refuse by name.
        for field_name, kind in (("role", Role), ("market", Market), ("state", NodeState)):
            value = getattr(self, field_name)
            if not isinstance(value, kind) and value in kind._value2member_map_:
                object.__setattr__(self, field_name, kind(value))

    @property
    def index(self) -> int:
        """The number in the node's name (`node10`: 10): nodes are ordered by it, never by their names."""
        return int(self.name.removeprefix("node"))

    @property
    def is_master(self) -> bool:
        return self.role == Role.MASTER


def master_of(nodes: Iterable[Node]) -> Node | None:
    return next((n for n in nodes if n.is_master), None)


def by_index(nodes: Iterable[Node]) -> list[Node]:
    return sorted(nodes, key=lambda n: n.index)
