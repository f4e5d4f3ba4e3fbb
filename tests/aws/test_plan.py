"""The plan command and prices(): values describing what `up` would do, with no mutating call."""
from __future__ import annotations

import json

from aws_helpers import PUBLIC_KEY, UBUNTU_AMI, cluster_config, stock_image_key

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import StateDir
from xeoncluster.commands import plan as plan_cmd
from xeoncluster.core.progress import Reporter
from xeoncluster.providers.base import LaunchRequest


def make_plan(provider, cluster, tmp_path):
    ctx = CommandContext(cluster, StateDir(cluster.name, tmp_path), provider, Reporter())
    return plan_cmd.run(ctx)


def test_plan_for_a_fresh_cluster(provider, aws, tmp_path):
    cluster = cluster_config(nodes=4, placement_group=True, master_market="on-demand",
                             instance_types=["c7i.2xlarge", "c6i.2xlarge"], on_demand_fallback=True)
    plan = make_plan(provider, cluster, tmp_path)
    assert aws.mutating(service=None) == []
    assert [(r.kind, r.action) for r in plan.resources] == [
        ("key_pair", "create"), ("security_group", "create"), ("placement_group", "create"), ("role", "create"),
        ("storage", "use")]
    assert plan.resources[-2].name == "xeoncluster-t1-us-east-1"
    # The caller's own place in the account's bucket (moto's caller id).
    assert plan.resources[-1].name == "s3://xeoncluster-123456789012-us-east-1/AKIAIOSFODNN7EXAMPLE"
    assert "tcp/22 from 203.0.113.7/32" in plan.resources[1].detail
    assert (plan.image.action, plan.image.image, plan.image.base_id) == ("bake", None, UBUNTU_AMI)
    master, workers = plan.instances
    assert (master.role, master.count, master.market, master.image) == ("master", 1, "on-demand", UBUNTU_AMI)
    assert (workers.role, workers.count, workers.market, workers.image) == ("worker", 3, "spot", "baked from node0")
    assert master.usd_per_hour == 0.357  # catalog: moto has no Pricing API
    assert workers.usd_per_hour == 0.00001  # moto's spot price
    assert plan.usd_per_hour == round(0.357 + 3 * 0.00001, 6)
    assert plan.prices["c6i.2xlarge"].on_demand_source == "catalog"
    assert "fallback instance type: c6i.2xlarge" in plan.notes
    json.dumps(plan.to_dict())


def test_plan_reuses_what_exists(provider, aws, tmp_path):
    cluster = cluster_config(nodes=2)
    prepared = provider.prepare(cluster, PUBLIC_KEY)
    provider.prepare_agent_access(cluster, prepared.network, stock_image_key(), None)
    node = provider.launch(LaunchRequest(cluster, 1, None, "master", 0))[0]
    image = provider.bake(cluster, node, stock_image_key())
    aws.clear()
    plan = make_plan(provider, cluster, tmp_path)
    assert aws.mutating(service=None) == []
    assert [r.action for r in plan.resources] == ["reuse", "reuse", "reuse", "use"]
    assert (plan.image.action, plan.image.image.id) == ("reuse", image.id)
    assert [i.image for i in plan.instances] == [image.id, image.id]


def test_plan_with_explicit_image(provider, tmp_path):
    plan = make_plan(provider, cluster_config(image=UBUNTU_AMI, nodes=1), tmp_path)
    assert (plan.image.action, plan.image.image.id) == ("given", UBUNTU_AMI)
    assert len(plan.instances) == 1


def test_prices_use_the_pricing_api_when_it_answers(provider, aws):
    product = {"terms": {"OnDemand": {"x": {"priceDimensions": {"y": {"pricePerUnit": {"USD": "0.4200000000"}}}}}}}
    aws.answer("GetProducts", lambda params: {"PriceList": [json.dumps(product)]})
    quote = provider.prices(cluster_config())["c7i.2xlarge"]
    assert (quote.on_demand_usd_per_hour, quote.on_demand_source) == (0.42, "pricing-api")
    assert (quote.spot_usd_per_hour, quote.spot_zone) == (0.00001, "us-east-1a")
    request = next(p for _, op, p in aws.calls if op == "GetProducts")
    fields = {f["Field"]: f["Value"] for f in request["Filters"]}
    assert fields["instanceType"] == "c7i.2xlarge" and fields["regionCode"] == "us-east-1"


def test_spot_price_is_the_latest_per_zone_then_the_minimum(provider, aws):
    import datetime as dt
    old, new = dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    history = [
        {"InstanceType": "c7i.2xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.10", "Timestamp": old},
        {"InstanceType": "c7i.2xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.30", "Timestamp": new},
        {"InstanceType": "c7i.2xlarge", "AvailabilityZone": "us-east-1b", "SpotPrice": "0.20", "Timestamp": new},
    ]
    aws.answer("DescribeSpotPriceHistory", lambda params: {"SpotPriceHistory": history})
    quote = provider.prices(cluster_config())["c7i.2xlarge"]
    assert (quote.spot_usd_per_hour, quote.spot_zone) == (0.20, "us-east-1b")


def test_unknown_type_has_no_price(provider, aws):
    aws.answer("DescribeSpotPriceHistory", lambda params: {"SpotPriceHistory": []})
    quote = provider.prices(cluster_config(instance_types=["c7a.large"]))["c7a.large"]
    assert quote.on_demand_usd_per_hour is None and quote.spot_usd_per_hour is None
