"""Prices: spot history, the Pricing API, and the catalog when the API cannot be read."""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from typing import Any

from xeoncluster.providers.aws import catalog
from xeoncluster.providers.aws.clients import paginate
from xeoncluster.providers.base import Node, PriceQuote
from xeoncluster.providers.node_kinds import Market

PRICING_REGION = "us-east-1"
INTER_ZONE_USD_PER_GB = 0.02  # EC2 bills $0.01/GB out of one zone and $0.01/GB into the other


def spot_prices_by_zone(ec2: Any, instance_types: list[str]) -> dict[tuple[str, str], float]:
    """The current spot price per (type, zone): the latest history entry of each."""
    history = paginate(ec2, "describe_spot_price_history", "SpotPriceHistory", InstanceTypes=list(instance_types),
                       ProductDescriptions=["Linux/UNIX"], StartTime=dt.datetime.now(dt.UTC))
    latest: dict[tuple[str, str], tuple[Any, float]] = {}
    for entry in history:
        key = (entry["InstanceType"], entry["AvailabilityZone"])
        if key not in latest or entry["Timestamp"] > latest[key][0]:
            latest[key] = (entry["Timestamp"], float(entry["SpotPrice"]))
    return {key: price for key, (_, price) in latest.items()}


def spot_prices(ec2: Any, instance_types: list[str]) -> dict[str, tuple[float, str]]:
    """Cheapest current spot price per type across zones: latest entry per zone, then min."""
    best: dict[str, tuple[float, str]] = {}
    for (itype, zone), price in sorted(spot_prices_by_zone(ec2, instance_types).items()):
        if itype not in best or price < best[itype][0]:
            best[itype] = (price, zone)
    return best


def node_prices(ec2: Any, pricing: Any | None, nodes: list[Node], region: str) -> list[Node]:
    """Each node with its $/hour: spot nodes at their zone's current spot price, others on demand.

    Prices are estimates; a price that cannot be read stays None (shown as "-")."""
    types = sorted({n.instance_type for n in nodes if n.instance_type})
    if not types:
        return nodes
    try:
        spot = spot_prices_by_zone(ec2, types)
    except Exception:  # noqa: BLE001 - an estimate must never fail `status`
        spot = {}
    on_demand = {t: _on_demand(pricing, t, region)[0] for t in types}
    priced = []
    for node in nodes:
        if node.market == Market.SPOT:
            price = spot.get((node.instance_type or "", node.zone or ""))
        else:
            price = on_demand.get(node.instance_type or "")
        priced.append(replace(node, price_per_hour=price))
    return priced


def on_demand_from_api(pricing: Any, instance_type: str, region: str) -> float | None:
    filters = [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in (
        ("instanceType", instance_type), ("regionCode", region), ("operatingSystem", "Linux"),
        ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]
    products = pricing.get_products(ServiceCode="AmazonEC2", Filters=filters, MaxResults=10)["PriceList"]
    for product in products:
        terms = json.loads(product).get("terms", {}).get("OnDemand", {})
        for term in terms.values():
            for dimension in term.get("priceDimensions", {}).values():
                usd = float(dimension.get("pricePerUnit", {}).get("USD", 0))
                if usd > 0:
                    return usd
    return None


def quote(ec2: Any, pricing: Any | None, instance_types: list[str], region: str) -> dict[str, PriceQuote]:
    try:
        spot = spot_prices(ec2, instance_types)
    except Exception:  # noqa: BLE001 - prices are estimates; a missing one shows as unknown
        spot = {}
    quotes = {}
    for itype in instance_types:
        od, source = _on_demand(pricing, itype, region)
        price, zone = spot.get(itype, (None, None))
        quotes[itype] = PriceQuote(itype, price, zone, od, source)
    return quotes


def _on_demand(pricing: Any | None, instance_type: str, region: str) -> tuple[float | None, str | None]:
    if pricing is not None:
        try:
            usd = on_demand_from_api(pricing, instance_type, region)
            if usd is not None:
                return usd, "pricing-api"
        except Exception:  # noqa: BLE001 - the Pricing API is optional (moto lacks it)
            pass
    known = catalog.lookup(instance_type)
    return (known.on_demand_usd_per_hour, "catalog") if known else (None, None)
