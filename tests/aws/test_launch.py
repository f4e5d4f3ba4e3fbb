"""prepare + launch against moto: what AWS ends up holding."""
from __future__ import annotations

from dataclasses import replace

import pytest
from aws_helpers import CALLER_IP, PUBLIC_KEY, UBUNTU_AMI, cluster_config

from xeoncluster.providers.aws.clients import RETRIES
from xeoncluster.providers.base import TAG_CLUSTER, TAG_ROLE, LaunchRequest


def tags(resource):
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def instances_of(ec2, name):
    reservations = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [name]}])["Reservations"]
    return [i for r in reservations for i in r["Instances"] if i["State"]["Name"] != "terminated"]


def up(provider, cluster, nodes):
    provider.prepare(cluster, PUBLIC_KEY)
    master = provider.launch(LaunchRequest(cluster, 1, None, "master", 0))
    workers = provider.launch(LaunchRequest(cluster, nodes - 1, None, "worker", 1))
    return master + workers


@pytest.mark.parametrize("nodes", [1, 4, 64])
def test_prepare_and_launch(provider, ec2, aws, nodes):
    cluster = cluster_config(nodes=nodes, root_volume_gib=123, master_market="on-demand")
    launched = up(provider, cluster, nodes)

    assert [n.name for n in launched] == [f"node{i}" for i in range(nodes)]
    assert [n.role for n in launched] == ["master"] + ["worker"] * (nodes - 1)
    assert [replace(n, price_per_hour=None) for n in provider.nodes(cluster)] == launched

    group = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": ["xeoncluster-t1"]}])["SecurityGroups"][0]
    assert tags(group)[TAG_CLUSTER] == "t1" and tags(group)[TAG_ROLE] == "security-group"
    perms = group["IpPermissions"]
    assert len(perms) == 2
    self_rule = next(p for p in perms if p["IpProtocol"] == "-1")
    assert [g["GroupId"] for g in self_rule["UserIdGroupPairs"]] == [group["GroupId"]]
    assert not self_rule.get("IpRanges")
    ssh = next(p for p in perms if p["IpProtocol"] == "tcp")
    assert (ssh["FromPort"], ssh["ToPort"]) == (22, 22)
    assert [r["CidrIp"] for r in ssh["IpRanges"]] == [f"{CALLER_IP}/32"]

    key = ec2.describe_key_pairs(KeyNames=["xeoncluster-t1"])["KeyPairs"][0]
    assert tags(key)[TAG_CLUSTER] == "t1" and tags(key)[TAG_ROLE] == "key-pair"

    raw = instances_of(ec2, "t1")
    assert len(raw) == nodes
    volume_ids = []
    for inst in raw:
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        assert inst["KeyName"] == "xeoncluster-t1"
        # moto reports the groups on the primary interface only (AWS mirrors them on the instance).
        assert [g["GroupId"] for g in inst["NetworkInterfaces"][0]["Groups"]] == [group["GroupId"]]
        assert tags(inst)[TAG_CLUSTER] == "t1"
        assert inst["ImageId"] == UBUNTU_AMI
        volume_ids += [m["Ebs"]["VolumeId"] for m in inst["BlockDeviceMappings"]]
        behaviour = ec2.describe_instance_attribute(InstanceId=inst["InstanceId"],
                                                    Attribute="instanceInitiatedShutdownBehavior")
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    volumes = ec2.describe_volumes(VolumeIds=volume_ids)["Volumes"]
    assert len(volumes) == nodes
    for volume in volumes:
        assert (volume["VolumeType"], volume["Size"], volume["Encrypted"]) == ("gp3", 123, True)
        assert tags(volume)[TAG_CLUSTER] == "t1"

    by_role = {tags(i)[TAG_ROLE]: i for i in raw}
    assert by_role["master"].get("InstanceLifecycle") is None  # master_market on-demand
    if nodes > 1:
        assert all(i.get("InstanceLifecycle") == "spot" for i in raw if tags(i)[TAG_ROLE] == "worker")
        assert {n.market for n in launched[1:]} == {"spot"}
    assert launched[0].market == "on-demand"
    # One run_instances per launch, whatever the node count.
    assert aws.mutating().count("RunInstances") == (1 if nodes == 1 else 2)
    assert "CreateTags" not in aws.mutating()


def test_run_request_shape(provider, aws):
    cluster = cluster_config(nodes=3)
    up(provider, cluster, 3)
    requests = [params for svc, op, params in aws.calls if op == "RunInstances"]
    worker = requests[-1]
    assert worker["MinCount"] == worker["MaxCount"] == 2
    assert worker["InstanceMarketOptions"] == {"MarketType": "spot", "SpotOptions": {
        "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    assert worker["MetadataOptions"]["HttpTokens"] == "required"
    assert worker["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert worker["BlockDeviceMappings"][0]["DeviceName"] == "/dev/sda1"
    kinds = [s["ResourceType"] for s in worker["TagSpecifications"]]
    assert kinds == ["instance", "volume", "spot-instances-request"]
    assert worker["ClientToken"] and worker["ClientToken"] != requests[0]["ClientToken"]
    assert "UserData" not in worker
    names = {t["Key"]: t["Value"] for t in worker["TagSpecifications"][0]["Tags"]}
    assert names["Name"] == "t1-nodes1-2" and names["xeoncluster:index-base"] == "1"


def test_on_demand_market_has_no_spot_options(provider, aws):
    cluster = cluster_config(nodes=2, market="on-demand")
    nodes = up(provider, cluster, 2)
    for _svc, op, params in aws.calls:
        if op == "RunInstances":
            assert "InstanceMarketOptions" not in params
            assert [s["ResourceType"] for s in params["TagSpecifications"]] == ["instance", "volume"]
    assert {n.market for n in nodes} == {"on-demand"}


def test_private_address_and_node_names_past_nine(provider):
    cluster = cluster_config(nodes=12, ssh={"cidr": "198.51.100.0/24", "address": "private"})
    nodes = up(provider, cluster, 12)
    assert [n.name for n in provider.nodes(cluster)][-3:] == ["node9", "node10", "node11"]
    assert all(n.ssh_host == n.private_ip for n in nodes)


def test_prepare_is_idempotent_and_follows_a_new_ip(make_provider, ec2, aws, events):
    cluster = cluster_config()
    first = make_provider().prepare(cluster, PUBLIC_KEY).created
    assert first["key_pair"] == ["xeoncluster-t1"] and len(first["security_group"]) == 1
    aws.clear()
    again = make_provider().prepare(cluster, PUBLIC_KEY).created
    assert again == {"key_pair": [], "security_group": [], "placement_group": []}
    assert aws.mutating() == []
    moved = make_provider(caller_ip=lambda: "198.51.100.9").prepare(cluster, PUBLIC_KEY).created
    assert moved["security_group"] == []
    group = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": ["xeoncluster-t1"]}])["SecurityGroups"][0]
    ssh = next(p for p in group["IpPermissions"] if p["IpProtocol"] == "tcp")
    assert [r["CidrIp"] for r in ssh["IpRanges"]] == ["198.51.100.9/32"]
    assert any("-tcp/22 from 203.0.113.7/32" in e for e in events)


def test_changed_public_key_replaces_the_key_pair(provider, ec2, events):
    cluster = cluster_config()
    provider.prepare(cluster, PUBLIC_KEY)
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB2c8E3qgVY2y8GJxkxPx5w1f8pFJ2u6v9c6pD0dK6bW other"
    created = provider.prepare(cluster, other).created
    assert created["key_pair"] == ["xeoncluster-t1"]
    assert any("replaced" in e for e in events)


def test_foreign_security_group_is_not_adopted(provider, ec2):
    from xeoncluster.core.errors import ProviderError
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    ec2.create_security_group(GroupName="xeoncluster-t1", Description="someone else's", VpcId=vpc)
    with pytest.raises(ProviderError, match="not tagged"):
        provider.prepare(cluster_config(), PUBLIC_KEY)


def test_placement_group(provider, aws):
    cluster = cluster_config(nodes=2, placement_group=True)
    created = provider.prepare(cluster, PUBLIC_KEY).created
    assert created["placement_group"] == ["xeoncluster-t1"]
    group = aws.placement_groups["xeoncluster-t1"]
    assert group["Strategy"] == "cluster" and {"Key": TAG_CLUSTER, "Value": "t1"} in group["Tags"]
    provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    run = next(p for _, op, p in aws.calls if op == "RunInstances")
    assert run["Placement"] == {"GroupName": "xeoncluster-t1"}
    assert provider.terminate(cluster).items["placement_group"] == ["xeoncluster-t1"]
    assert aws.placement_groups == {}


def test_adaptive_retries_configured(provider):
    for service in ("ec2", "sts", "ssm"):
        config = provider.clients.client(service).meta.config
        # botocore stores max_attempts (retries) as total_max_attempts (first try + retries).
        assert config.retries == {"mode": "adaptive", "total_max_attempts": 11}
    assert RETRIES == {"mode": "adaptive", "max_attempts": 10}


def test_provider_counts_its_own_calls(provider):
    provider.prepare(cluster_config(), PUBLIC_KEY)
    ops = [c.operation for c in provider.calls if c.mutating]
    assert ops == ["ImportKeyPair", "CreateSecurityGroup", "AuthorizeSecurityGroupIngress"]


def test_host_keys_from_console(provider, aws):
    console = ("boot...\n-----BEGIN SSH HOST KEY KEYS-----\n"
               "ecdsa-sha2-nistp256 AAAAE2VjZHNh root@ip-10-0-0-1\nssh-ed25519 AAAAC3Nza root@ip-10-0-0-1\n"
               "-----END SSH HOST KEY KEYS-----\nmore\n")
    cluster = cluster_config(nodes=1)
    node = up(provider, cluster, 1)[0]
    assert provider.host_keys(node) == []  # moto's console has no host-key block
    real = aws.handle

    def handle(client, operation, params):
        if operation == "GetConsoleOutput":
            return {"InstanceId": params["InstanceId"], "Output": console}
        return real(client, operation, params)

    aws.handle = handle
    assert provider.host_keys(node) == ["ecdsa-sha2-nistp256 AAAAE2VjZHNh", "ssh-ed25519 AAAAC3Nza"]
