"""What a provider may do beyond the core of base.Provider: each ability is a Protocol that a provider
implements or not, and callers ask with isinstance(). No flag stands apart from the methods it describes,
and no base method raises "not supported".

Where a caller needs an answer from every provider, the function beside the Protocol gives what a
provider without the ability means (no host keys, no price); the rest narrow with isinstance themselves.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers.base import (
    BaseImage,
    Image,
    Network,
    PendingImage,
    Placement,
    PlannedResource,
    PriceQuote,
    Provider,
    Removed,
)
from xeoncluster.providers.node_kinds import Node
from xeoncluster.storage.base import StorageLocation
from xeoncluster.topology import CpuTopology

if TYPE_CHECKING:
    from xeoncluster.providers.config import ClusterConfig


@runtime_checkable
class BakesInBackground(Protocol):
    """An image can be taken from a running node and finished by the cloud while the node works on."""

    def pending_image(self, key: str) -> PendingImage | None:
        """An image of this key an earlier `up` is still baking (or whose bake failed). Read-only."""

    def wait_for_image(self, image_id: str, timeout: float) -> Image | None:
        """The image once usable, or None if it failed or is not usable within `timeout` seconds."""

    def start_bake(self, cluster: ClusterConfig, node: Node, key: str,
                   on_snapshot: Callable[[], None] | None = None, configure_seconds: float | None = None) -> str:
        """Start an image and return its id without waiting."""


@runtime_checkable
class ReadsHostKeys(Protocol):
    def host_keys(self, node: Node) -> list[str]:
        """The node's host keys out of band (this may wait a while for them to appear)."""


@runtime_checkable
class RemovesNodes(Protocol):
    def remove_node(self, cluster: ClusterConfig, node: Node) -> Removed: ...


@runtime_checkable
class HasAccount(Protocol):
    def account_id(self) -> str:
        """The account the provider's credentials act in."""


@runtime_checkable
class HasOwners(Protocol):
    """Resources belong to who made them (on a cloud: the caller's identity, which each one is tagged with)."""

    def owner(self) -> str | None: ...

    def act_for(self, owner: str | None) -> None:
        """Create resources for `owner` rather than for the caller: the run agent launches with the
        cluster's role (every node holds it) for the user who made the cluster."""


@runtime_checkable
class AgentOnMaster(Protocol):
    """The run agent lives on the master (reached over SSH), not on this machine: the cluster outlives the
    user's machine, and the master can act on it through the provider's API itself."""

    def prepare_agent_access(self, cluster: ClusterConfig, network: Network | None, image_key: str | None,
                             storage: StorageLocation | None) -> list[str]:
        """Give the master what its run agent needs (on a cloud: a role scoped to this cluster and its
        storage prefix); idempotent. Returns what it created."""


@runtime_checkable
class SizesDisks(Protocol):
    """The nodes' disks have a size of their own, which a master to be baked may need more of."""

    bake_root_gib: int  # the root disk a master is launched with when it will be baked

    def root_gib(self, cluster: ClusterConfig) -> int | None: ...

    def grow_root(self, cluster: ClusterConfig, node: Node) -> bool:
        """True once the node's disk is root_gib(cluster)."""


@runtime_checkable
class LaunchesTogether(Protocol):
    def launches_together(self, cluster: ClusterConfig) -> bool:
        """True where launch() may run in two threads at once (master and workers of a warm `up`)."""


@runtime_checkable
class PurgesImages(Protocol):
    def purge_images(self, cluster: ClusterConfig) -> Removed:
        """The images the cluster baked: they are tied to it."""


@runtime_checkable
class BillsZoneTraffic(Protocol):
    def inter_zone_usd_per_gb(self) -> float:
        """What a GB between two of the provider's zones costs, both directions' charges together."""


@runtime_checkable
class PricesNodes(Protocol):
    def prices(self, cluster: ClusterConfig) -> dict[str, PriceQuote]: ...


@runtime_checkable
class PlansResources(Protocol):
    def planned_resources(self, cluster: ClusterConfig) -> list[PlannedResource]:
        """What `up` would create or reuse besides the nodes."""


@runtime_checkable
class HasBaseImages(Protocol):
    def base_image(self, cluster: ClusterConfig) -> BaseImage:
        """What nodes start from before any bake."""


@runtime_checkable
class ExplainsLoss(Protocol):
    def loss_reason(self, cluster: ClusterConfig, node: Node) -> str:
        """Why a node the cluster had is gone."""


@runtime_checkable
class PlansMachines(Protocol):
    """The provider has machine types, with a catalog to plan from and choices to say."""

    def placement(self, cluster: ClusterConfig) -> Placement: ...

    def plan_notes(self, cluster: ClusterConfig) -> tuple[str, ...]: ...

    def machine_topology(self, instance_type: str) -> CpuTopology: ...


def host_keys(provider: Provider, node: Node) -> list[str]:
    """[] without the ability: the keys are then trusted on first use."""
    return provider.host_keys(node) if isinstance(provider, ReadsHostKeys) else []


def inter_zone_usd_per_gb(provider: Provider) -> float:
    """0.0 without the ability: traffic between zones is then not billed, or there are no zones."""
    return provider.inter_zone_usd_per_gb() if isinstance(provider, BillsZoneTraffic) else 0.0


def require_prices(provider: Provider, option: str) -> None:
    """A spending ceiling is enforced from the nodes' prices: without them it could never be reached."""
    if not isinstance(provider, PricesNodes):
        raise ConfigError(f"{option}: the {provider.name} provider has no node prices, so a spending ceiling "
                          "could never be reached", hint="drop it on this provider")


def remove_node(provider: Provider, cluster: ClusterConfig, node: Node) -> Removed:
    if not isinstance(provider, RemovesNodes):
        raise ProviderError(f"the {provider.name} provider cannot remove a single node",
                            hint="remove the whole cluster and create it again")
    return provider.remove_node(cluster, node)


def start_bake(provider: Provider, cluster: ClusterConfig, node: Node, key: str,
               on_snapshot: Callable[[], None] | None = None, configure_seconds: float | None = None) -> str:
    if not isinstance(provider, BakesInBackground):
        raise ProviderError(f"the {provider.name} provider cannot bake in the background")
    return provider.start_bake(cluster, node, key, on_snapshot, configure_seconds)


def account_id(provider: Provider) -> str:
    if not isinstance(provider, HasAccount):
        raise ConfigError(f"the {provider.name} provider has no account", hint="pass --account ID")
    return provider.account_id()


def machine_topology(provider: Provider, instance_type: str) -> CpuTopology:
    if not isinstance(provider, PlansMachines):
        raise ConfigError(f"the {provider.name} provider has no machine types to plan for without a cluster",
                          hint="drop --nodes/--instance-type to plan on the cluster that is up")
    return provider.machine_topology(instance_type)


def root_gib(provider: Provider, cluster: ClusterConfig) -> int | None:
    """None without the ability: the nodes' disks have no size of their own."""
    return provider.root_gib(cluster) if isinstance(provider, SizesDisks) else None


def bake_root_gib(provider: Provider) -> int | None:
    return provider.bake_root_gib if isinstance(provider, SizesDisks) else None


def base_image(provider: Provider, cluster: ClusterConfig) -> BaseImage:
    """Without the ability, nodes start from this machine's own OS."""
    return provider.base_image(cluster) if isinstance(provider, HasBaseImages) else BaseImage(f"{provider.name}-host")


def loss_reason(provider: Provider, cluster: ClusterConfig, node: Node) -> str:
    """Without the ability, only that the node is gone."""
    return provider.loss_reason(cluster, node) if isinstance(provider, ExplainsLoss) else "gone"


def placement(provider: Provider, cluster: ClusterConfig) -> Placement:
    """Without machine types, nodes are this machine: no region, machine type or market."""
    if isinstance(provider, PlansMachines):
        return provider.placement(cluster)
    return Placement(None, "-", provider.name, provider.name)
