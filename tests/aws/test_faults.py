"""Fault injection: any mutating call of prepare/launch/bake fails once; terminate leaves nothing."""
from __future__ import annotations

import pytest
from aws_helpers import PUBLIC_KEY, cluster_config, live_state, nothing_left

from xeoncluster.core.errors import XeonClusterError
from xeoncluster.providers.base import LaunchRequest

# (operation, occurrence) for every mutating EC2 call of a full `up` with a placement group.
UP_MUTATIONS = [
    ("ImportKeyPair", 1), ("CreateSecurityGroup", 1), ("AuthorizeSecurityGroupIngress", 1),
    ("CreatePlacementGroup", 1), ("RunInstances", 1), ("CreateImage", 1), ("RunInstances", 2),
]


def full_up(provider, cluster):
    provider.prepare(cluster, PUBLIC_KEY)
    master = provider.launch(LaunchRequest(cluster, 1, None, "master", 0))
    image = provider.bake(cluster, master[0], "a" * 64)
    provider.launch(LaunchRequest(cluster, cluster.nodes - 1, image, "worker", 1))


def test_fault_list_covers_every_mutating_call(provider, aws):
    full_up(provider, cluster_config(nodes=3, placement_group=True))
    seen = aws.mutating()
    assert [(op, seen[:i + 1].count(op)) for i, op in enumerate(seen)] == UP_MUTATIONS


# Not retryable anywhere (InternalError would be: run_instances retries transient errors itself).
FAULT = "InvalidParameterValue"


@pytest.mark.parametrize(("operation", "occurrence"), UP_MUTATIONS)
def test_failure_then_terminate_leaves_nothing(make_provider, ec2, aws, operation, occurrence):
    cluster = cluster_config(nodes=3, placement_group=True)
    aws.fail(operation, FAULT, occurrence=occurrence)
    with pytest.raises(XeonClusterError, match=FAULT):
        full_up(make_provider(), cluster)
    make_provider().terminate(cluster)
    assert nothing_left(live_state(ec2, "t1"))
    assert aws.placement_groups == {}


@pytest.mark.parametrize(("operation", "occurrence"), [
    ("RunInstances", 2), ("DescribeInstances", 2), ("CreateImage", 1), ("AuthorizeSecurityGroupIngress", 1)])
def test_keyboard_interrupt_then_terminate_leaves_nothing(make_provider, ec2, aws, operation, occurrence):
    cluster = cluster_config(nodes=3)
    aws.fail(operation, KeyboardInterrupt(), occurrence=occurrence)
    with pytest.raises(KeyboardInterrupt):
        full_up(make_provider(), cluster)
    make_provider().terminate(cluster)
    assert nothing_left(live_state(ec2, "t1"))


def test_interrupt_while_waiting_terminates_that_attempt_at_once(provider, ec2, aws):
    cluster = cluster_config(nodes=4)
    provider.prepare(cluster, PUBLIC_KEY)
    # The waiter's first DescribeInstances happens right after RunInstances succeeded.
    aws.fail("DescribeInstances", KeyboardInterrupt(), occurrence=1, when=lambda p: "InstanceIds" in p)
    with pytest.raises(KeyboardInterrupt):
        provider.launch(LaunchRequest(cluster, 4, None, "worker", 0))
    assert live_state(ec2, "t1")["instances"] == []  # terminated without waiting for `down`
    assert "TerminateInstances" in aws.mutating()


def test_describe_failure_after_launch_terminates_the_instances(provider, ec2, aws):
    cluster = cluster_config(nodes=2)
    provider.prepare(cluster, PUBLIC_KEY)
    aws.fail("DescribeInstances", "InternalError", occurrence=2, when=lambda p: "InstanceIds" in p)
    with pytest.raises(XeonClusterError, match="InternalError"):
        provider.launch(LaunchRequest(cluster, 2, None, "worker", 0))
    assert live_state(ec2, "t1")["instances"] == []
