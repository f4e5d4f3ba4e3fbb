"""Cached images: bake, find by key, list, remove with snapshots."""
from __future__ import annotations

import pytest

from aws_helpers import PUBLIC_KEY, UBUNTU_AMI, cluster_config
from provisioner.errors import ConfigError, ProviderError
from provisioner.providers.base import TAG_CLUSTER, TAG_IMAGE_KEY

KEY = "f" * 64


def tags(resource):
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


@pytest.fixture
def master(provider):
    cluster = cluster_config(nodes=2)
    provider.prepare(cluster, PUBLIC_KEY)
    return cluster, provider.launch(cluster, 1, None, "master", 0)[0]


def test_bake_tags_image_and_snapshot_and_find_reuses_it(provider, ec2, master):
    cluster, node = master
    assert provider.find_image(KEY) is None
    image = provider.bake(cluster, node, KEY)
    assert image.key == KEY and image.cluster == "t1" and image.snapshots

    raw = ec2.describe_images(ImageIds=[image.id])["Images"][0]
    assert tags(raw)[TAG_IMAGE_KEY] == KEY and tags(raw)[TAG_CLUSTER] == "t1"
    snap = ec2.describe_snapshots(SnapshotIds=list(image.snapshots))["Snapshots"][0]
    assert tags(snap)[TAG_IMAGE_KEY] == KEY and tags(snap)[TAG_CLUSTER] == "t1"

    assert provider.find_image(KEY) == image
    assert provider.find_image("0" * 64) is None
    assert provider.get_image(image.id) == image
    assert provider.get_image("ami-00000000") is None
    assert [i.id for i in provider.images()] == [image.id]

    workers = provider.launch(cluster, 1, image, "worker", 1)
    assert ec2.describe_instances(InstanceIds=[workers[0].id])["Reservations"][0]["Instances"][0]["ImageId"] == image.id


def test_create_image_called_without_reboot(provider, aws, master):
    cluster, node = master
    provider.bake(cluster, node, KEY)
    request = next(p for _, op, p in aws.calls if op == "CreateImage")
    assert request["NoReboot"] is True
    assert [s["ResourceType"] for s in request["TagSpecifications"]] == ["image", "snapshot"]
    assert all("secret" not in str(t).lower() for t in request["TagSpecifications"])


def test_remove_image_deletes_snapshots(provider, ec2, master):
    cluster, node = master
    image = provider.bake(cluster, node, KEY)
    removed = provider.remove_image(image.id)
    assert removed.items == {"image": [image.id], "snapshot": list(image.snapshots)}
    assert ec2.describe_images(Owners=["self"])["Images"] == []
    assert provider.remove_image(image.id).empty


def test_purge_images_of_one_cluster(provider, master):
    cluster, node = master
    first = provider.bake(cluster, node, KEY)
    second = provider.bake(cluster, node, "e" * 64)
    removed = provider.purge_images(cluster)
    assert sorted(removed.items["image"]) == sorted([first.id, second.id])
    assert provider.images() == []


def test_interrupted_bake_leaves_no_image(provider, ec2, aws, master):
    cluster, node = master
    aws.fail("DescribeImages", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        provider.bake(cluster, node, KEY)
    assert ec2.describe_images(Owners=["self"])["Images"] == []


def test_bake_failure_is_a_provider_error(provider, aws, master):
    cluster, node = master
    aws.fail("CreateImage", "InvalidInstanceID.NotFound")
    with pytest.raises(ProviderError, match="creating an image of i-.*InvalidInstanceID.NotFound"):
        provider.bake(cluster, node, KEY)


def test_base_image_from_ssm(provider):
    assert provider.base_image(cluster_config()).id == UBUNTU_AMI


def test_base_image_missing_is_unknown_and_preflight_refuses_it(make_provider):
    provider = make_provider(region="eu-west-1")
    base = provider.base_image(cluster_config(region="eu-west-1"))
    assert (base.id, base.note) == (None, "SSM parameter missing")
    with pytest.raises(ConfigError, match="no Ubuntu 24.04 image"):
        provider.preflight(cluster_config(region="eu-west-1"))
