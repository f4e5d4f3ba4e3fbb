"""A replacement stays in the master's zone: it tries every listed type there, and crosses zones only
when aws.replace_across_zones allows it (DDP traffic across zones is billed per GB)."""
from __future__ import annotations

import pytest
from aws_helpers import PUBLIC_KEY, cluster_config
from test_capacity import placement, subnet_zone

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.base import LaunchRequest
from xeoncluster.providers.node_kinds import Role

TYPES = ["c7i.2xlarge", "c6i.2xlarge"]
ZONES = ["us-east-1a", "us-east-1b"]


def master_in_zone_a(provider, ec2, **overrides):
    cluster = cluster_config(nodes=2, instance_types=TYPES, zones=ZONES, **overrides)
    provider.prepare(cluster, PUBLIC_KEY)
    [master] = provider.launch(LaunchRequest(cluster, 1, None, Role.MASTER, 0))
    assert placement(ec2, master)[0] == "us-east-1a"
    return cluster, master


def zone_a_is_full(aws, ec2):
    in_a = subnet_zone(ec2)
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99, when=lambda p: in_a(p) == "us-east-1a")


def running_zones(ec2):
    return sorted(i["Placement"]["AvailabilityZone"] for r in ec2.describe_instances()["Reservations"]
                  for i in r["Instances"] if i["State"]["Name"] == "running")


def tried(aws, ec2):
    zone = subnet_zone(ec2)
    return [(p["InstanceType"], zone(p)) for _, op, p in aws.calls if op == "RunInstances"]


def replace_worker(provider, cluster, master):
    return provider.launch(LaunchRequest(cluster, 1, None, Role.WORKER, 2, near=master, replacement=True))


def test_a_replacement_keeps_the_masters_zone_when_it_has_no_capacity(provider, ec2, aws):
    cluster, master = master_in_zone_a(provider, ec2)
    zone_a_is_full(aws, ec2)
    aws.clear()
    with pytest.raises(ProviderError) as caught:
        replace_worker(provider, cluster, master)
    assert running_zones(ec2) == ["us-east-1a"]  # the master only: nothing landed in us-east-1b
    assert tried(aws, ec2) == [("c7i.2xlarge", "us-east-1a"), ("c6i.2xlarge", "us-east-1a")]
    message = caught.value.message
    assert message.startswith("could not launch 1 worker node(s) in us-east-1a, node0's zone, which a replacement "
                              "keeps")
    assert "aws.replace_across_zones: true lets it cross" in message
    assert "c6i.2xlarge spot in us-east-1a (InsufficientInstanceCapacity" in message
    assert "aws.replace_across_zones: true" in caught.value.hint


def test_a_replacement_tries_every_type_in_the_masters_zone_first(provider, ec2, aws):
    cluster, master = master_in_zone_a(provider, ec2, replace_across_zones=True)
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99, when=lambda p: p["InstanceType"] == TYPES[0])
    aws.clear()
    [new] = replace_worker(provider, cluster, master)
    assert placement(ec2, new) == ("us-east-1a", "c6i.2xlarge", "spot")
    assert tried(aws, ec2) == [("c7i.2xlarge", "us-east-1a"), ("c6i.2xlarge", "us-east-1a")]


def test_a_replacement_crosses_zones_when_the_config_allows_it(provider, ec2, aws, events):
    cluster, master = master_in_zone_a(provider, ec2, replace_across_zones=True)
    zone_a_is_full(aws, ec2)
    aws.clear()
    [new] = replace_worker(provider, cluster, master)
    assert placement(ec2, new)[0] == "us-east-1b"
    assert running_zones(ec2) == ["us-east-1a", "us-east-1b"]
    assert tried(aws, ec2)[:2] == [("c7i.2xlarge", "us-east-1a"), ("c6i.2xlarge", "us-east-1a")]
    assert any("not in node0's zone us-east-1a" in e for e in events)


def test_workers_of_a_new_cluster_still_go_where_there_is_capacity(provider, ec2, aws):
    """Only a replacement keeps the zone: `up`'s workers cross with a warning, as before."""
    cluster, master = master_in_zone_a(provider, ec2)
    zone_a_is_full(aws, ec2)
    [new] = provider.launch(LaunchRequest(cluster, 1, None, Role.WORKER, 1, near=master))
    assert placement(ec2, new)[0] == "us-east-1b"
