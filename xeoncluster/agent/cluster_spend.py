"""What a cluster's nodes have cost so far, for its `max_cost` ceiling: each node's $/hour (the
provider's price now) times the hours since it launched, or since the cluster was created where the
provider gives no launch time. Nodes already gone (replaced, removed) are no longer listed and not
counted: the figure is a floor, like every price here an estimate."""
from __future__ import annotations

from collections.abc import Callable

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.providers.abilities import PricesNodes
from xeoncluster.providers.base import Node

# Prices are asked at most this often: the nodes of the last answer are costed up to each check between.
PRICE_SECONDS = 300.0


def spent(nodes: list[Node], created_at: float, now: float) -> float:
    return sum((n.price_per_hour or 0.0) * max(0.0, now - (n.launched_at or created_at)) / 3600 for n in nodes)


class ClusterSpend:
    def __init__(self, priced_nodes: Callable[[], list[Node]]) -> None:
        self.priced_nodes = priced_nodes
        self.nodes: list[Node] | None = None
        self.asked_at = float("-inf")

    def __call__(self, now: float, created_at: float) -> float:
        """The cost up to `now`; a failed question raises, and is asked again at the next check."""
        if self.nodes is None or now - self.asked_at >= PRICE_SECONDS:
            self.nodes, self.asked_at = self.priced_nodes(), now
        return spent(self.nodes, created_at, now)


def cluster_spend(ctx: CommandContext) -> ClusterSpend | None:
    """None where the provider has no prices (`up` refuses a max_cost there)."""
    provider = ctx.provider
    if not isinstance(provider, PricesNodes):
        return None
    return ClusterSpend(lambda: provider.nodes(ctx.config))
