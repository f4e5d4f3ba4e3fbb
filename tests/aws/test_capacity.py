"""Capacity fallback: next zone, then next type, then on-demand (spot only, if allowed)."""
from __future__ import annotations

import pytest
from aws_helpers import PUBLIC_KEY, cluster_config

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.base import LaunchRequest


def subnet_zone(ec2):
    zones = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]}
    return lambda params: zones[params["NetworkInterfaces"][0]["SubnetId"]]


def placement(ec2, node):
    inst = ec2.describe_instances(InstanceIds=[node.id])["Reservations"][0]["Instances"][0]
    return inst["Placement"]["AvailabilityZone"], inst["InstanceType"], inst.get("InstanceLifecycle")


def test_next_zone_through_the_moto_backend(provider, ec2, events, monkeypatch):
    """The error comes from moto itself, so it goes through botocore's parsing and retry path."""
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models import EC2Backend

    real = EC2Backend.run_instances
    calls = []

    def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):
        calls.append(kwargs.get("placement"))
        if len(calls) == 1:
            raise EC2ClientError("InsufficientInstanceCapacity", "We currently do not have sufficient capacity")
        return real(self, image_id, count, user_data, security_group_names, **kwargs)

    monkeypatch.setattr(EC2Backend, "run_instances", run_instances)
    cluster = cluster_config(nodes=2, zones=["us-east-1a", "us-east-1b"])
    provider.prepare(cluster, PUBLIC_KEY)
    nodes = provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    assert len(calls) == 2
    assert {placement(ec2, n)[0] for n in nodes} == {"us-east-1b"}
    assert {n.zone for n in nodes} == {"us-east-1b"}
    assert any("us-east-1a unavailable (InsufficientInstanceCapacity" in e for e in events)
    assert events[-1].startswith("launched 2 worker node(s) as c7i.2xlarge spot in us-east-1b after "
                                 "c7i.2xlarge spot in us-east-1a (InsufficientInstanceCapacity")


def test_second_type_after_all_zones_fail_for_the_first(provider, ec2, aws, events):
    cluster = cluster_config(nodes=1, instance_types=["c7i.2xlarge", "c6i.2xlarge"], zones=["us-east-1a", "us-east-1b"])
    provider.prepare(cluster, PUBLIC_KEY)
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99,
             when=lambda p: p["InstanceType"] == "c7i.2xlarge")
    node = provider.launch(LaunchRequest(cluster, 1, None, "master", 0))[0]
    tried = [(p["InstanceType"], subnet_zone(ec2)(p)) for _, op, p in aws.calls if op == "RunInstances"]
    assert tried == [("c7i.2xlarge", "us-east-1a"), ("c7i.2xlarge", "us-east-1b"), ("c6i.2xlarge", "us-east-1a")]
    assert placement(ec2, node) == ("us-east-1a", "c6i.2xlarge", "spot")
    assert "launched 1 master node(s) as c6i.2xlarge spot in us-east-1a" in events[-1]


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded"])
def test_spot_falls_back_to_on_demand_when_allowed(provider, ec2, aws, events, code):
    cluster = cluster_config(nodes=2, on_demand_fallback=True, zones=["us-east-1a", "us-east-1b"])
    provider.prepare(cluster, PUBLIC_KEY)
    aws.fail("RunInstances", code, times=99, when=lambda p: "InstanceMarketOptions" in p)
    nodes = provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    assert {n.market for n in nodes} == {"on-demand"}
    assert {placement(ec2, n)[2] for n in nodes} == {None}
    assert aws.ops().count("RunInstances") == 3
    assert "as c7i.2xlarge on-demand in us-east-1a after" in events[-1]


def test_spot_without_fallback_fails_listing_what_was_tried(provider, ec2, aws):
    cluster = cluster_config(nodes=2, zones=["us-east-1a", "us-east-1b"], instance_types=["c7i.2xlarge", "c6i.2xlarge"])
    provider.prepare(cluster, PUBLIC_KEY)
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99)
    with pytest.raises(ProviderError) as caught:
        provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    message = caught.value.message
    assert message.startswith("could not launch 2 worker node(s): ")
    for itype in ("c7i.2xlarge", "c6i.2xlarge"):
        for zone in ("us-east-1a", "us-east-1b"):
            assert f"{itype} spot in {zone} (InsufficientInstanceCapacity" in message
    assert "on-demand" not in message and "on_demand_fallback" in caught.value.hint
    assert aws.ops().count("RunInstances") == 4
    assert not provider.nodes(cluster)


def test_other_errors_fail_at_once(provider, aws):
    cluster = cluster_config(nodes=2, on_demand_fallback=True)
    provider.prepare(cluster, PUBLIC_KEY)
    aws.fail("RunInstances", "InvalidParameterCombination")
    with pytest.raises(ProviderError, match="InvalidParameterCombination"):
        provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    assert aws.ops().count("RunInstances") == 1


def test_zones_default_to_those_offering_the_type(provider, ec2, aws):
    # moto does not offer c6i in us-east-1e: that zone is skipped, not tried.
    cluster = cluster_config(nodes=1, instance_types=["c6i.2xlarge"])
    provider.prepare(cluster, PUBLIC_KEY)
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99)
    with pytest.raises(ProviderError) as caught:
        provider.launch(LaunchRequest(cluster, 1, None, "master", 0))
    assert "us-east-1e" not in caught.value.message and "us-east-1f" in caught.value.message


def instances_die_before_running(monkeypatch, reasons):
    """The n-th run_instances call's instances go to terminated with StateReason reasons[n] (a
    (code, message) pair; None lets them run), as EC2 does when a launch fails after it was accepted."""
    from moto.ec2.models import EC2Backend
    from moto.ec2.models.instances import StateReason

    real = EC2Backend.run_instances
    calls = []

    def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):
        reservation = real(self, image_id, count, user_data, security_group_names, **kwargs)
        reason = reasons[len(calls)] if len(calls) < len(reasons) else None
        calls.append(kwargs.get("placement"))
        if reason is not None:
            for instance in reservation.instances:
                instance.terminate()
                instance.state_reason = StateReason(f"{reason[0]}: {reason[1]}", reason[0])
        return reservation

    monkeypatch.setattr(EC2Backend, "run_instances", run_instances)
    return calls


def terminated_ids(aws):
    return [i for _, op, p in aws.calls if op == "TerminateInstances" for i in p["InstanceIds"]]


@pytest.mark.parametrize("code", ["Server.InsufficientInstanceCapacity", "Server.SpotInstanceTermination",
                                  "Server.InternalError"])
def test_a_server_side_death_before_running_tries_the_next_zone(provider, ec2, aws, events, monkeypatch, code):
    cluster = cluster_config(nodes=2, zones=["us-east-1a", "us-east-1b"])
    provider.prepare(cluster, PUBLIC_KEY)
    instances_die_before_running(monkeypatch, [(code, "Server error")])
    nodes = provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    assert [subnet_zone(ec2)(p) for _, op, p in aws.calls if op == "RunInstances"] == ["us-east-1a", "us-east-1b"]
    assert {n.zone for n in nodes} == {"us-east-1b"}
    assert any("us-east-1a unavailable" in e and code in e for e in events)
    assert len(terminated_ids(aws)) == 2


@pytest.mark.parametrize("code, hint", [
    ("Client.InternalError", "kms:CreateGrant"),
    ("Client.VolumeLimitExceeded", "root_volume_gib"),
    ("Client.InstanceInitiatedShutdown", "image"),
])
def test_a_client_side_death_before_running_stops_at_once(provider, ec2, aws, events, monkeypatch, code, hint):
    cluster = cluster_config(nodes=2, zones=["us-east-1a", "us-east-1b"], instance_types=["c7i.2xlarge", "c6i.2xlarge"],
                             on_demand_fallback=True)
    provider.prepare(cluster, PUBLIC_KEY)
    instances_die_before_running(monkeypatch, [(code, "Client error on launch")] * 9)
    with pytest.raises(ProviderError) as caught:
        provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    assert aws.ops().count("RunInstances") == 1
    assert caught.value.message == (f"2 worker node(s) stopped before running (c7i.2xlarge spot in us-east-1a): "
                                    f"{code}: Client error on launch")
    assert hint in caught.value.hint and "add instance types" not in caught.value.hint
    dead = [i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert sorted(terminated_ids(aws)) == sorted(dead) and len(dead) == 2


def test_the_kms_hint_names_every_permission_the_default_ebs_key_needs(provider, aws, monkeypatch):
    cluster = cluster_config(nodes=1)
    provider.prepare(cluster, PUBLIC_KEY)
    instances_die_before_running(monkeypatch, [("Client.InternalError", "Client error on launch")])
    with pytest.raises(ProviderError) as caught:
        provider.launch(LaunchRequest(cluster, 1, None, "master", 0))
    for action in ("kms:CreateGrant", "kms:Decrypt", "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncrypt*",
                   "kms:DescribeKey"):
        assert action in caught.value.hint
    assert "\n" not in caught.value.one_line()
