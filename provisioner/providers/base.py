"""What every provider returns and the small interface the lifecycle drives.

A provider owns machines. It knows nothing about SSH sessions, playbooks or training.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..config import ClusterConfig

TAG_CLUSTER = "xeoncluster:cluster"
TAG_ROLE = "xeoncluster:role"
TAG_IMAGE_KEY = "xeoncluster:image-key"


@dataclass(frozen=True)
class Node:
    name: str
    id: str
    private_ip: str
    ssh_host: str
    role: str
    market: str
    zone: str | None = None
    instance_type: str | None = None
    state: str = "running"
    price_per_hour: float | None = None


@dataclass(frozen=True)
class Image:
    id: str
    key: str
    name: str
    created: str | None = None
    cluster: str | None = None
    snapshots: tuple[str, ...] = ()
    size_bytes: int | None = None


@dataclass(frozen=True)
class Removed:
    """What terminate() removed, by kind, so the CLI can print it."""

    items: dict[str, list[str]] = field(default_factory=dict)

    def merge(self, other: "Removed") -> "Removed":
        merged = {k: list(v) for k, v in self.items.items()}
        for kind, ids in other.items.items():
            merged.setdefault(kind, []).extend(ids)
        return Removed(merged)

    @property
    def empty(self) -> bool:
        return not any(self.items.values())


@dataclass(frozen=True)
class PackageSource:
    """Where a node's pip gets the stack from: real indexes on clouds, a wheelhouse locally."""

    pip_args: tuple[str, ...]


class Provider(Protocol):
    name: str

    def preflight(self, cluster: "ClusterConfig") -> list[str]:
        """Read-only checks; raise ConfigError on bad input. Returns notes to show the user."""
        ...

    def prepare(self, cluster: "ClusterConfig", public_key: str) -> dict[str, list[str]]:
        """Key pair, security group or bridge; idempotent. Returns the ids it created."""
        ...

    def find_image(self, key: str) -> Image | None: ...

    def get_image(self, image_id: str) -> Image | None: ...

    def launch(self, cluster: "ClusterConfig", count: int, image: Image | None, role: str, first_index: int) -> list[Node]: ...

    def bake(self, cluster: "ClusterConfig", node: Node, key: str) -> Image: ...

    def nodes(self, cluster: "ClusterConfig") -> list[Node]: ...

    def host_keys(self, node: Node) -> list[str]:
        """Host public keys learnt out of band (e.g. console output); empty means trust on first use."""
        ...

    def package_source(self, cluster: "ClusterConfig", packages: list[str], index_urls: list[str]) -> PackageSource: ...

    def terminate(self, cluster: "ClusterConfig") -> Removed: ...

    def images(self) -> list[Image]: ...

    def remove_image(self, image_id: str) -> Removed: ...
