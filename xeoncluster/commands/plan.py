"""`xeoncluster plan`: what `up` would do, as a value, from read-only calls only.

The image decision is the same `decide_image` that `up` executes; the provider adds only what it
knows of its cloud (resources it would create or reuse, prices).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.image import ImageAction, ImagePlan, decide_image
from xeoncluster.core.stacks import get_stack
from xeoncluster.providers.abilities import PlansMachines, PlansResources, PricesNodes
from xeoncluster.providers.abilities import placement as planned_placement
from xeoncluster.providers.base import Placement, PlannedResource, PriceQuote
from xeoncluster.providers.node_kinds import Market, Role


@dataclass(frozen=True)
class PlannedInstances:
    role: Role
    count: int
    instance_type: str
    market: Market | str
    image: str
    usd_per_hour: float | None


@dataclass(frozen=True)
class PlannedStack:
    name: str
    backend: str
    packages: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    cluster: str
    provider: str
    region: str | None
    nodes: int
    resources: tuple[PlannedResource, ...]
    instances: tuple[PlannedInstances, ...]
    image: ImagePlan
    stack: PlannedStack
    usd_per_hour: float | None
    prices: dict[str, PriceQuote] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["image"] = self.image.to_dict()
        return data


def run(ctx: CommandContext) -> Plan:
    cfg, provider = ctx.config, ctx.provider
    checks = provider.preflight(cfg, for_plan=True)
    stack = get_stack(cfg.stack)
    image = decide_image(cfg, provider, stack)
    prices = provider.prices(cfg) if isinstance(provider, PricesNodes) else {}
    placement = planned_placement(provider, cfg)
    groups = instance_groups(cfg.nodes, placement, image, prices)
    notes = (provider.plan_notes(cfg) if isinstance(provider, PlansMachines) else ()) + tuple(checks)
    resources = (*(provider.planned_resources(cfg) if isinstance(provider, PlansResources) else []),
                 planned_storage(ctx))
    return Plan(cfg.name, provider.name, placement.region, cfg.nodes, resources, groups,
                image, PlannedStack(stack.name, stack.backend, stack.packages), total_per_hour(groups, bool(prices)),
                prices, notes)


def planned_storage(ctx: CommandContext) -> PlannedResource:
    location = ctx.provider.storage_location(ctx.config, ctx.config.storage.url, ctx.state.home / "storage",
                                             create=False)
    return PlannedResource("storage", location.url, "use", "checkpoints, logs and results of every run "
                                                           "(made if missing; never removed by down)")


def instance_groups(nodes: int, placement: Placement, image: ImagePlan,
                    prices: dict[str, PriceQuote]) -> tuple[PlannedInstances, ...]:
    base = image.base_id or f"unknown ({image.base_note})"
    bakes = image.action is ImageAction.BAKE and not image.in_background
    master_image = base if bakes or image.image is None else image.image.id
    worker_image = "baked from node0" if bakes else image.image.id if image.image else base
    quote = prices.get(placement.instance_type)
    groups = (
        PlannedInstances(Role.MASTER, 1, placement.instance_type, placement.master_market, master_image,
                         quote.for_market(placement.master_market) if quote else None),
        PlannedInstances(Role.WORKER, nodes - 1, placement.instance_type, placement.worker_market, worker_image,
                         quote.for_market(placement.worker_market) if quote else None),
    )
    return tuple(g for g in groups if g.count)


def total_per_hour(groups: tuple[PlannedInstances, ...], priced: bool) -> float | None:
    if not priced:
        return 0.0
    if any(g.usd_per_hour is None for g in groups):
        return None
    return round(sum((g.usd_per_hour or 0.0) * g.count for g in groups), 6)
