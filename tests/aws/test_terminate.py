"""terminate(): everything by tag, with no local state, idempotent."""
from __future__ import annotations

import pytest
from aws_helpers import PUBLIC_KEY, UBUNTU_AMI, cluster_config, live_state, nothing_left

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.base import LaunchRequest


def test_terminate_by_tag_with_a_fresh_provider(make_provider, ec2):
    cluster = cluster_config(nodes=4)
    first = make_provider()
    first.prepare(cluster, PUBLIC_KEY)
    first.launch(LaunchRequest(cluster, 1, None, "master", 0))
    first.launch(LaunchRequest(cluster, 3, None, "worker", 1))
    stopped = first.nodes(cluster)[1].id
    ec2.stop_instances(InstanceIds=[stopped])

    removed = make_provider().terminate(cluster)  # nothing carried over from `first`
    assert len(removed.items["instances"]) == 4 and stopped in removed.items["instances"]
    assert len(removed.items["security_group"]) == 1 and removed.items["key_pair"] == ["xeoncluster-t1"]
    assert nothing_left(live_state(ec2, "t1"))

    again = make_provider().terminate(cluster)
    assert again.empty


def test_terminate_leaves_other_clusters_alone(provider, ec2):
    mine, theirs = cluster_config(name="mine", nodes=2), cluster_config(name="theirs", nodes=2)
    for c in (mine, theirs):
        provider.prepare(c, PUBLIC_KEY)
        provider.launch(LaunchRequest(c, 2, None, "worker", 0))
    provider.terminate(mine)
    assert nothing_left(live_state(ec2, "mine"))
    left = live_state(ec2, "theirs")
    assert len(left["instances"]) == 2 and left["key_pairs"] and left["security_groups"]


def test_terminate_cancels_open_spot_requests(provider, ec2, aws):
    cluster = cluster_config()
    provider.prepare(cluster, PUBLIC_KEY)
    request = ec2.request_spot_instances(
        InstanceCount=1, LaunchSpecification={"ImageId": UBUNTU_AMI, "InstanceType": "c7i.2xlarge"},
        TagSpecifications=[{"ResourceType": "spot-instances-request",
                            "Tags": [{"Key": "xeoncluster:cluster", "Value": "t1"},
                                     {"Key": "xeoncluster:owner", "Value": provider.owner()}]}])
    request_id = request["SpotInstanceRequests"][0]["SpotInstanceRequestId"]
    removed = provider.terminate(cluster)
    assert request_id in removed.items["spot_requests"]
    assert "CancelSpotInstanceRequests" in aws.mutating()
    assert nothing_left(live_state(ec2, "t1"))


def dependency_violation(times: int):
    from moto.ec2.models import EC2Backend
    real = EC2Backend.delete_security_group
    state = {"left": times}

    def delete_security_group(self, *args, **kwargs):
        if state["left"] > 0:
            state["left"] -= 1
            from moto.ec2.exceptions import EC2ClientError
            raise EC2ClientError("DependencyViolation", "resource sg has a dependent object")
        return real(self, *args, **kwargs)
    return delete_security_group


def test_security_group_delete_retries_dependency_violation(provider, ec2, events, monkeypatch, aws):
    from moto.ec2.models import EC2Backend
    cluster = cluster_config()
    provider.prepare(cluster, PUBLIC_KEY)
    provider.launch(LaunchRequest(cluster, 1, None, "master", 0))
    slept = []
    provider.sleep = slept.append
    monkeypatch.setattr(EC2Backend, "delete_security_group", dependency_violation(3))
    removed = provider.terminate(cluster)
    assert len(removed.items["security_group"]) == 1
    assert slept == [2, 4, 8]
    assert sum("still in use" in e for e in events) == 3
    assert aws.ops().count("DeleteSecurityGroup") == 4
    assert nothing_left(live_state(ec2, "t1"))


def test_security_group_delete_gives_up_with_a_hint(provider, monkeypatch):
    from moto.ec2.models import EC2Backend
    cluster = cluster_config()
    provider.prepare(cluster, PUBLIC_KEY)
    monkeypatch.setattr(EC2Backend, "delete_security_group", dependency_violation(100))
    with pytest.raises(ProviderError, match="DependencyViolation") as caught:
        provider.terminate(cluster)
    assert "down" in caught.value.hint


def test_terminate_failure_is_a_provider_error(provider, aws):
    cluster = cluster_config()
    provider.prepare(cluster, PUBLIC_KEY)
    provider.launch(LaunchRequest(cluster, 1, None, "master", 0))
    aws.fail("TerminateInstances", "UnauthorizedOperation")
    with pytest.raises(ProviderError, match="UnauthorizedOperation"):
        provider.terminate(cluster)


@pytest.mark.parametrize("code", ["NotImplemented", "InternalFailure"])
def test_terminate_where_placement_groups_are_not_implemented(provider, ec2, aws, events, code):
    cluster = cluster_config(nodes=2)
    provider.prepare(cluster, PUBLIC_KEY)
    provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    aws.fail("DescribePlacementGroups", code, times=99)
    removed = provider.terminate(cluster)
    assert removed.items["placement_group"] == [] and len(removed.items["instances"]) == 2
    assert "placement groups not checked: this endpoint does not implement DescribePlacementGroups" in events
    assert "DeletePlacementGroup" not in aws.ops()
    assert nothing_left(live_state(ec2, "t1"))


def test_other_placement_group_errors_still_fail_terminate(provider, aws):
    cluster = cluster_config(nodes=1)
    provider.prepare(cluster, PUBLIC_KEY)
    aws.fail("DescribePlacementGroups", "UnauthorizedOperation", times=99)
    with pytest.raises(ProviderError, match="UnauthorizedOperation"):
        provider.terminate(cluster)
