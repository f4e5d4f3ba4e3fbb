"""What every provider returns, and the one interface the commands drive.

A provider owns machines. It knows nothing about SSH sessions, playbooks, pip or the CLI.
Every operation is declared here; an optional capability has a default that says plainly that
the provider does not support it, so no caller ever asks `getattr(provider, ...)`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers.node_kinds import Market, Node, Role
from xeoncluster.storage.base import Storage, StorageLocation
from xeoncluster.topology import CpuTopology

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
    # An image can be taken from a running node and finished by the cloud while the node works on.
    bakes_in_background: ClassVar[bool] = False
    # Where nodes learn of a reclaim in advance (xeoncluster/node/checkpoints/notices.py; a spot market's
    # warning, minutes ahead); None: nodes get no notice.
    notice_source: ClassVar[str | None] = None
    # The run agent lives on the master (reached over SSH), not on this machine: the cluster outlives
    # the user's machine, and the master can act on it through the provider's API itself.
    agent_on_master: ClassVar[bool] = False
    # The root disk a master is launched with when it will be baked; None: disks have no size here.
    bake_root_gib: ClassVar[int | None] = None

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

    # -- optional capabilities ---------------------------------------------------------------
    def base_image(self, cluster: ClusterConfig) -> BaseImage:
        """Not supported: nodes start from this machine's own OS."""
        return BaseImage(f"{self.name}-host")

    def host_keys(self, node: Node) -> list[str]:
        """Not supported: no out-of-band host keys, so they are trusted on first use.
        (Where supported, this may wait a while for the keys to appear.)"""
        return []

    def prepare_agent_access(self, cluster: ClusterConfig, network: Network | None, image_key: str | None,
                             storage: StorageLocation | None) -> list[str]:
        """Give the master what its run agent needs to act on the cluster by itself (on a cloud: a role
        scoped to this cluster and its storage prefix); idempotent. Returns what it created. Not
        supported: the agent runs on this machine, with the user's own access."""
        return []

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

    def pending_image(self, key: str) -> PendingImage | None:
        """Not supported: images are made while `up` waits, so none is ever left pending. Read-only."""
        return None

    def wait_for_image(self, image_id: str, timeout: float) -> Image | None:
        """Not supported (nothing is ever pending). The image once usable, or None if it failed or
        is not usable within `timeout` seconds."""
        return None

    def start_bake(self, cluster: ClusterConfig, node: Node, key: str,
                   on_snapshot: Callable[[], None] | None = None, configure_seconds: float | None = None) -> str:
        """Start an image and return its id without waiting. Not supported: see bakes_in_background."""
        raise ProviderError(f"the {self.name} provider cannot bake in the background")

    def account_id(self) -> str:
        """The account the provider's credentials act in, where it has accounts."""
        raise ConfigError(f"the {self.name} provider has no account", hint="pass --account ID")

    def owner(self) -> str | None:
        """Who the resources this provider creates belong to (on a cloud: the caller's identity, which
        each one is tagged with); None where nothing is owned."""
        return None

    def act_for(self, owner: str | None) -> None:
        """Create resources for `owner` rather than for the caller: the run agent launches with the
        master's credentials for the user who made the cluster. Nothing to do where nothing is owned."""
        return None

    def remove_node(self, cluster: ClusterConfig, node: Node) -> Removed:
        """Not supported: nodes can only be removed with the whole cluster."""
        raise ProviderError(f"the {self.name} provider cannot remove a single node",
                            hint="remove the whole cluster and create it again")

    def loss_reason(self, cluster: ClusterConfig, node: Node) -> str:
        """Why a node the cluster had is gone. Not supported: only that it is gone."""
        return "gone"

    def root_gib(self, cluster: ClusterConfig) -> int | None:
        """Not supported: the nodes' disks have no size of their own."""
        return None

    def grow_root(self, cluster: ClusterConfig, node: Node) -> bool:
        """Not supported: the node's disk has no size of its own. True once it is root_gib(cluster)."""
        return False

    def launches_together(self, cluster: ClusterConfig) -> bool:
        """Not supported: nodes are made one at a time. True where launch() may run in two threads at once
        (master and workers of a warm `up` boot together)."""
        return False

    def purge_images(self, cluster: ClusterConfig) -> Removed:
        """Not supported: the provider's images are not tied to the cluster that baked them."""
        return Removed()

    def planned_resources(self, cluster: ClusterConfig) -> list[PlannedResource]:
        """Not supported: the provider creates nothing but the nodes."""
        return []

    def prices(self, cluster: ClusterConfig) -> dict[str, PriceQuote]:
        """Not supported: nodes cost nothing per hour."""
        return {}

    def placement(self, cluster: ClusterConfig) -> Placement:
        """Not supported: nodes are this machine, with no region, machine type or market."""
        return Placement(None, "-", self.name, self.name)

    def plan_notes(self, cluster: ClusterConfig) -> tuple[str, ...]:
        """Not supported: nothing about capacity or fallbacks to say."""
        return ()

    def machine_topology(self, instance_type: str) -> CpuTopology:
        """Not supported: the provider has no catalog of machine types to plan from."""
        raise ConfigError(f"the {self.name} provider has no machine types to plan for without a cluster",
                          hint="drop --nodes/--instance-type to plan on the cluster that is up")
