"""The provider against a bare moto_server on loopback, as the EC2 stand-in runs it: no in-process
mock and no fake placement groups (moto_server answers those calls with an HTML 500 page)."""
from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator

import boto3
import pytest
from aws_helpers import PUBLIC_KEY, REGION, UBUNTU_AMI, cluster_config

from xeoncluster.providers.aws.provider import AwsProvider


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    with contextlib.redirect_stdout(io.StringIO()):
        server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    try:
        yield url
    finally:
        with contextlib.redirect_stdout(io.StringIO()):
            server.stop()


def server_provider(events: list[str]) -> AwsProvider:
    provider = AwsProvider(REGION, events=events.append, caller_ip=lambda: "203.0.113.7")
    provider.instance_wait = {"Delay": 0, "MaxAttempts": 3}
    provider.sleep = lambda seconds: None
    return provider


def test_down_against_moto_server_skips_placement_groups_it_cannot_describe(endpoint):
    events: list[str] = []
    provider = server_provider(events)
    cluster = cluster_config(nodes=1, image=UBUNTU_AMI)
    provider.prepare(cluster, PUBLIC_KEY)
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
    run = ec2.run_instances(ImageId=UBUNTU_AMI, MinCount=1, MaxCount=1, InstanceType="c7i.2xlarge",
                            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                {"Key": "xeoncluster:cluster", "Value": "t1"},
                                {"Key": "xeoncluster:owner", "Value": provider.owner()}]}])
    removed = provider.terminate(cluster)
    assert removed.items["instances"] == [run["Instances"][0]["InstanceId"]]
    assert removed.items["key_pair"] == ["xeoncluster-t1"] and len(removed.items["security_group"]) == 1
    assert removed.items["placement_group"] == []
    assert "placement groups not checked: this endpoint does not implement DescribePlacementGroups" in events


def test_plan_with_a_placement_group_against_moto_server(endpoint):
    provider = server_provider([])
    resources = provider.planned_resources(cluster_config(nodes=2, placement_group=True, image=UBUNTU_AMI))
    [group] = [r for r in resources if r.kind == "placement_group"]
    assert group.action == "create" and "not checked" in group.detail
