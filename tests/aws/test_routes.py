"""Nodes need a way out (apt, PyPI, the Hugging Face hub) whatever address SSH uses."""
from __future__ import annotations

import pytest
from aws_helpers import PUBLIC_KEY, REGION, cluster_config

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.aws.network import default_route_targets
from xeoncluster.providers.base import LaunchRequest


def main_route_table(ec2, vpc_id):
    tables = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc_id]},
                                                {"Name": "association.main", "Values": ["true"]}])["RouteTables"]
    return tables[0]["RouteTableId"]


def default_vpc(ec2):
    return ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]


def subnet_in(ec2, zone):
    subnets = ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": [zone]}])["Subnets"]
    return next(s["SubnetId"] for s in subnets if s.get("DefaultForAz"))


def isolate(ec2, subnet_id):
    """Give one subnet its own route table without a default route (a private subnet without NAT)."""
    table = ec2.create_route_table(VpcId=default_vpc(ec2))["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=table, SubnetId=subnet_id)
    return table


def test_private_ssh_address_still_gets_a_public_ip(provider, aws):
    cluster = cluster_config(nodes=2, ssh={"cidr": "198.51.100.0/24", "address": "private"})
    provider.prepare(cluster, PUBLIC_KEY)
    nodes = provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    [request] = [p for _, op, p in aws.calls if op == "RunInstances"]
    assert request["NetworkInterfaces"][0]["AssociatePublicIpAddress"] is True
    assert all(n.ssh_host == n.private_ip for n in nodes)


def test_the_default_vpc_passes(make_provider, aws):
    make_provider().preflight(cluster_config())
    assert "DescribeRouteTables" in aws.ops()


def test_a_subnet_without_a_default_route_is_a_config_error(make_provider, ec2, aws):
    subnet = subnet_in(ec2, "us-east-1b")
    isolate(ec2, subnet)
    aws.clear()
    with pytest.raises(ConfigError) as caught:
        make_provider().preflight(cluster_config(zones=["us-east-1a", "us-east-1b"]))
    assert caught.value.message == (f"subnet {subnet} (us-east-1b) has no default route (0.0.0.0/0): nodes there "
                                    "would have no route to package mirrors (apt, PyPI, Hugging Face)")
    assert "NAT gateway" in caught.value.hint
    assert aws.mutating(service=None) == []


def test_a_nat_route_and_unused_zones_are_fine(make_provider, ec2):
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=subnet_in(ec2, "us-east-1a"),
                                 AllocationId=address)["NatGateway"]["NatGatewayId"]
    table = isolate(ec2, subnet_in(ec2, "us-east-1b"))
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
    unused = subnet_in(ec2, "us-east-1c")
    isolate(ec2, unused)  # not in zones: never launched into
    notes = make_provider().preflight(cluster_config(zones=["us-east-1a", "us-east-1b"]))
    # It passed on the NAT route and despite the isolated zone, not on the main table's internet route.
    private = subnet_in(ec2, "us-east-1b")
    assert default_route_targets(ec2, default_vpc(ec2), [private, unused]) == {private: nat, unused: None}
    assert not [note for note in notes if "default route" in note]


def test_a_main_route_table_without_a_default_route_fails_every_subnet(make_provider, ec2):
    table = main_route_table(ec2, default_vpc(ec2))
    ec2.delete_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0")
    with pytest.raises(ConfigError, match=r"subnet subnet-\w+ \(us-east-1a\) has no default route"):
        make_provider().preflight(cluster_config(zones=["us-east-1a"]))


def test_plan_only_warns(provider, ec2, tmp_path):
    from xeoncluster.cluster.command_context import CommandContext
    from xeoncluster.cluster.state import StateDir
    from xeoncluster.commands import plan as plan_cmd
    from xeoncluster.core.progress import Reporter

    isolate(ec2, subnet_in(ec2, "us-east-1a"))
    cluster = cluster_config(zones=["us-east-1a"])
    plan = plan_cmd.run(CommandContext(cluster, StateDir(cluster.name, tmp_path), provider, Reporter()))
    assert any(n.startswith("warning: subnet ") and n.endswith("`up` would stop here") for n in plan.notes)
    assert plan.region == REGION
