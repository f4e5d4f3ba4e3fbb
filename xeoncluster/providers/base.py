"""What every provider returns, and the one interface the commands drive.

A provider owns machines. It knows nothing about SSH sessions, playbooks, pip or the CLI.
The core every provider has is declared here; what only some can do is a Protocol of its own
(abilities.py), which callers check with isinstance(), never `getattr(provider, ...)`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.node_kinds import Market, Node, Role
from xeoncluster.storage.base import Storage, StorageLocation

if TYPE_CHECKING:
    from xeoncluster.providers.config import ClusterConfig

TAG_CLUSTER = "xeoncluster:cluster"
# Who made the resource: the creating identity's UserId, which the user's IAM policy compares with
# `${aws:userid}`, so that a user may act only on the clusters they made.
TAG_OWNER = "xeoncluster:owner"
TAG_ROLE = "xeoncluster:role"
TAG_IMAGE_KEY = "xeoncluster:image-key"


@dataclass(frozen=True)
class Image:
    id: str
    key: str
    name: str
    created: str | None = None
    cluster: str | None = None
    snapshots: tuple[str, ...] = ()
    size_bytes: int | None = None
    owner: str | None = None  # who made it, where the provider records owners


@dataclass(frozen=True)
class PendingImage:
    """An image of a key that an earlier `up` is still baking in the background (or whose bake failed)."""

    id: str
    key: str
    started: float | None = None            # epoch seconds of the CreateImage
    progress: float | None = None           # 0..1, where the cloud reports it (EBS snapshot progress)
    configure_seconds: float | None = None  # what configuring from the base took the `up` that started it
    failed: bool = False

    def remaining_seconds(self, now: float) -> float | None:
        """Time left, extrapolated from the progress so far; None when nothing can be said yet."""
        if self.failed or self.started is None or not self.progress:
            return None
        elapsed = max(0.0, now - self.started)
        return elapsed * (1 - min(1.0, self.progress)) / self.progress

    def worth_waiting(self, now: float) -> bool:
        """Waiting pays only when the image is expected before configuring from the base would end."""
        left = self.remaining_seconds(now)
        return left is not None and self.configure_seconds is not None and left < self.configure_seconds


@dataclass(frozen=True)
class BaseImage:
    """What nodes start from before any bake; `id` is None when it cannot be known (then `note` says why)."""

    id: str | None
    note: str = ""


@dataclass(frozen=True)
class Network:
    """What launches need, found once by prepare() so that each launch does not look it up again."""

    vpc_id: str | None = None
    security_group_id: str | None = None
    subnets: Mapping[str, str] = field(default_factory=dict)  # zone -> subnet id
    zones_by_type: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchRequest:
    """One launch: `count` nodes of `role`, named from `first_index` on. `network`: what prepare() returned;
    looked up again when not given. `near`: launch close to this node (its zone first, where the provider
    has zones). `root_gib`: instead of the config's. `base`: the base image's id as `up` resolved it, for
    callers that may not resolve it again (the run agent's role has no access to where the provider looks
    it up)."""

    cluster: ClusterConfig
    count: int
    image: Image | None
    role: Role
    first_index: int
    network: Network | None = None
    near: Node | None = None
    root_gib: int | None = None
    base: str | None = None
    replacement: bool = False  # takes a lost node's place: kept in `near`'s zone unless the config lets it cross

    @property
    def for_master(self) -> bool:
        return self.role == Role.MASTER


@dataclass(frozen=True)
class Prepared:
    created: dict[str, list[str]]  # ids this call created, by kind: state records them before the next step
    network: Network = field(default_factory=Network)


@dataclass(frozen=True)
class Removed:
    """What terminate() removed, by kind, so the CLI can print it."""

    items: dict[str, list[str]] = field(default_factory=dict)

    def merge(self, other: Removed) -> Removed:
        merged = {k: list(v) for k, v in self.items.items()}
        for kind, ids in other.items.items():
            merged.setdefault(kind, []).extend(ids)
        return Removed(merged)

    @property
    def empty(self) -> bool:
        return not any(self.items.values())


@dataclass(frozen=True)
class PlannedResource:
    kind: str
    name: str
    action: str  # "create" | "reuse" | "use" (kept outside the cluster)
    detail: str = ""


@dataclass(frozen=True)
class Placement:
    """Where a cluster's nodes would run and what they are, as `plan` shows it."""

    region: str | None
    instance_type: str  # "-": the provider has no machine types
    master_market: Market | str  # str: as in Node.market
    worker_market: Market | str


@dataclass(frozen=True)
class PriceQuote:
    instance_type: str
    spot_usd_per_hour: float | None = None
    spot_zone: str | None = None
    on_demand_usd_per_hour: float | None = None
    on_demand_source: str | None = None  # "pricing-api" | "catalog" | None

    def for_market(self, market: Market | str) -> float | None:
        return self.spot_usd_per_hour if market == Market.SPOT else self.on_demand_usd_per_hour


class Provider(ABC):
    name: ClassVar[str]
    # Nodes that are this machine (namespaces) share its OS packages and files, and reach no
    # network beyond the cluster: OS changes are only checked, and packages come from the host.
    shares_host: ClassVar[bool] = False
    # Where nodes learn of a reclaim in advance (xeoncluster/node/checkpoints/notices.py; a spot market's
    # warning, minutes ahead); None: nodes get no notice.
    notice_source: ClassVar[str | None] = None

    @abstractmethod
    def preflight(self, cluster: ClusterConfig, *, for_plan: bool = False) -> list[str]:
        """Read-only checks; raise ConfigError on bad input. Returns notes to show the user.
        `for_plan`: a missing base image is a note, not an error (the plan still shows the rest)."""

    @abstractmethod
    def prepare(self, cluster: ClusterConfig, public_key: str) -> Prepared:
        """Key pair, security group or bridge; idempotent."""

    @abstractmethod
    def find_image(self, key: str) -> Image | None:
        """A usable image of this key; read-only, never waits."""

    @abstractmethod
    def get_image(self, image_id: str) -> Image | None: ...

    @abstractmethod
    def launch(self, request: LaunchRequest) -> list[Node]: ...

    @abstractmethod
    def bake(self, cluster: ClusterConfig, node: Node, key: str,
             on_snapshot: Callable[[], None] | None = None) -> Image:
        """`on_snapshot` is called once the image's content is fixed, before waiting for it to be usable."""

    @abstractmethod
    def nodes(self, cluster: ClusterConfig, priced: bool = True) -> list[Node]:
        """From the provider's own truth (tags, namespaces), never from local state. `priced`: with each
        node's $/hour, where the provider has prices (a poll that only asks which nodes exist skips it)."""

    @abstractmethod
    def terminate(self, cluster: ClusterConfig) -> Removed:
        """Everything the cluster owns; idempotent."""

    @abstractmethod
    def images(self) -> list[Image]: ...

    @abstractmethod
    def remove_image(self, image_id: str) -> Removed: ...

    # -- with a default for providers that have no more to say ------------------------------
    def storage_location(self, cluster: ClusterConfig, url: str, default_folder: Path,
                         create: bool, setup: bool = False) -> StorageLocation:
        """Where runs of this cluster keep what must outlive the nodes. Not supported beyond a folder on
        this machine (`auto`: `default_folder`); `create` makes it, else it is only checked; `setup`: the
        administrator's `storage init`, which also puts back what a shared store lacks of its lock-down."""
        if url == "auto":
            folder = default_folder
        elif url.startswith(("/", "file:///")):
            folder = Path(url.removeprefix("file://"))
        else:
            raise ConfigError(f"storage: {url!r}: the {self.name} provider keeps runs in a folder on this machine",
                              hint="storage: auto, or an absolute folder such as /srv/xeoncluster-runs")
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        return StorageLocation(url=str(folder), folder=str(folder))

    def open_storage(self, location: StorageLocation) -> Storage:
        """A folder, wherever the agent runs (the local provider's agent runs on this machine)."""
        from xeoncluster.storage.folder import FolderStorage

        return FolderStorage(location)

