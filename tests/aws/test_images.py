"""Cached images: bake, find by key, list, remove with snapshots."""
from __future__ import annotations

import re

import pytest
from aws_helpers import PUBLIC_KEY, UBUNTU_AMI, cluster_config

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers.base import TAG_CLUSTER, TAG_IMAGE_KEY, LaunchRequest

KEY = "f" * 64


def tags(resource):
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def cluster_snapshots(ec2, cluster="t1"):
    found = ec2.describe_snapshots(OwnerIds=["self"], Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}])
    return [s["SnapshotId"] for s in found["Snapshots"]]


@pytest.fixture
def master(provider):
    cluster = cluster_config(nodes=2)
    provider.prepare(cluster, PUBLIC_KEY)
    return cluster, provider.launch(LaunchRequest(cluster, 1, None, "master", 0))[0]


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

    workers = provider.launch(LaunchRequest(cluster, 1, image, "worker", 1))
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


def test_purge_leaves_an_image_of_the_same_cluster_name_that_another_owner_baked(provider, master):
    cluster, node = master
    mine = provider.bake(cluster, node, KEY)
    provider.act_for("AIDACOLLEAGUE0000001")  # a colleague's cluster of the same name baked this one
    theirs = provider.bake(cluster, node, "e" * 64)
    provider.act_for(None)
    assert provider.purge_images(cluster).items["image"] == [mine.id]
    assert provider.images() == []  # the colleague's is theirs to list
    provider.act_for("AIDACOLLEAGUE0000001")
    assert [i.id for i in provider.images()] == [theirs.id]


def test_an_image_a_colleague_tagged_with_our_key_is_never_found_and_is_named(provider, ec2, master, events):
    """The key is a digest of public inputs, the same for every user of this version: any user may tag an
    image of theirs with it. Only the owner tag, which the user's policy sets to the caller alone, says whose
    an image is; the newest image of the key is the colleague's, and it is still not ours."""
    cluster, node = master
    mine = provider.bake(cluster, node, KEY)
    provider.act_for("AIDACOLLEAGUE0000001")
    theirs = provider.bake(cluster, node, KEY)
    assert provider.find_image(KEY) == theirs  # for its owner, it is theirs to reuse
    provider.start_bake(cluster, node, "e" * 64)
    provider.act_for(None)
    assert provider.find_image(KEY) == mine
    assert [i.id for i in provider.images()] == [mine.id]
    assert provider.pending_image("e" * 64) is None
    assert [e for e in events if theirs.id in e and "another" in e] == [
        f"image {theirs.id} of this key belongs to another identity (xeoncluster:owner=AIDACOLLEAGUE0000001): "
        "left alone, never used for your nodes"]
    provider.remove_image(mine.id)
    assert provider.find_image(KEY) is None


def test_interrupted_bake_leaves_no_image(provider, ec2, aws, master):
    cluster, node = master
    aws.fail("DescribeImages", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        provider.bake(cluster, node, KEY)
    assert ec2.describe_images(Owners=["self"])["Images"] == []


def test_bake_failure_is_a_provider_error(provider, aws, master):
    cluster, node = master
    aws.fail("CreateImage", "InvalidInstanceID.NotFound")
    with pytest.raises(ProviderError, match=r"creating an image of i-.*InvalidInstanceID\.NotFound"):
        provider.bake(cluster, node, KEY)


def test_base_image_from_ssm(provider):
    assert provider.base_image(cluster_config()).id == UBUNTU_AMI


def test_base_image_missing_is_unknown_and_preflight_refuses_it(make_provider):
    provider = make_provider(region="eu-west-1")
    base = provider.base_image(cluster_config(region="eu-west-1"))
    assert (base.id, base.note) == (None, "SSM parameter missing")
    with pytest.raises(ConfigError, match=re.escape("no Ubuntu 24.04 image")):
        provider.preflight(cluster_config(region="eu-west-1"))


def image_not_found_at_first(monkeypatch, times):
    """Real EC2 answers InvalidAMIID.NotFound for a moment after CreateImage: DescribeImages of a
    new image id fails `times` times (in moto's backend, so botocore parses a real error reply)."""
    from moto.ec2.exceptions import InvalidAMIIdError
    from moto.ec2.models.amis import AmiBackend

    real = AmiBackend.describe_images
    misses = {}

    def describe_images(self, ami_ids=None, **kwargs):
        for ami_id in ami_ids or []:
            if ami_id != UBUNTU_AMI and ami_id in self.amis and misses.get(ami_id, 0) < limit[0]:
                misses[ami_id] = misses.get(ami_id, 0) + 1
                raise InvalidAMIIdError(ami_id)
        return real(self, ami_ids=ami_ids, **kwargs)

    limit = [times]
    monkeypatch.setattr(AmiBackend, "describe_images", describe_images)
    return misses, limit


def test_bake_waits_through_image_not_found_right_after_create(provider, ec2, master, monkeypatch):
    cluster, node = master
    misses, _ = image_not_found_at_first(monkeypatch, times=2)
    image = provider.bake(cluster, node, KEY)
    assert misses == {image.id: 2}
    assert [i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]] == [image.id]


def test_bake_that_fails_after_create_leaves_no_image_or_snapshot(provider, ec2, master, monkeypatch):
    cluster, node = master
    _, limit = image_not_found_at_first(monkeypatch, times=99)  # the wait and the clean-up both see NotFound
    with pytest.raises(ProviderError, match="baking an image from node0"):
        provider.bake(cluster, node, KEY)
    limit[0] = 0
    assert ec2.describe_images(Owners=["self"])["Images"] == []
    assert cluster_snapshots(ec2) == []


def test_bake_clean_up_retries_a_deregister_that_does_not_see_the_new_image(provider, ec2, aws, master, monkeypatch):
    cluster, node = master
    _, limit = image_not_found_at_first(monkeypatch, times=99)
    aws.fail("DeregisterImage", "InvalidAMIID.NotFound", times=2)
    with pytest.raises(ProviderError):
        provider.bake(cluster, node, KEY)
    limit[0] = 0
    assert aws.ops().count("DeregisterImage") == 3
    assert ec2.describe_images(Owners=["self"])["Images"] == []


def test_remove_image_retries_a_snapshot_still_in_use_after_deregister(provider, ec2, aws, master):
    """Right after DeregisterImage, EC2 answers DeleteSnapshot with InvalidSnapshot.InUse for a while."""
    cluster, node = master
    image = provider.bake(cluster, node, KEY)
    aws.fail("DeleteSnapshot", "InvalidSnapshot.InUse", times=2)
    removed = provider.remove_image(image.id)
    assert removed.items == {"image": [image.id], "snapshot": list(image.snapshots)}
    assert aws.ops().count("DeleteSnapshot") == 3
    assert cluster_snapshots(ec2) == []
    assert ec2.describe_images(Owners=["self"])["Images"] == []


def test_purge_images_retries_a_snapshot_still_in_use(provider, ec2, aws, master):
    cluster, node = master
    provider.bake(cluster, node, KEY)
    aws.fail("DeleteSnapshot", "InvalidSnapshot.InUse", times=2)
    assert len(provider.purge_images(cluster).items["snapshot"]) == 1
    assert cluster_snapshots(ec2) == []


def test_a_snapshot_in_use_for_too_long_is_a_provider_error_with_a_hint(provider, aws, master):
    cluster, node = master
    image = provider.bake(cluster, node, KEY)
    aws.fail("DeleteSnapshot", "InvalidSnapshot.InUse", times=99)
    with pytest.raises(ProviderError, match=f"deleting snapshot {image.snapshots[0]}: InvalidSnapshot.InUse") as caught:
        provider.remove_image(image.id)
    assert "again" in caught.value.hint
    assert 2 < aws.ops().count("DeleteSnapshot") < 10


def deregister_deletes_snapshots(monkeypatch):
    """What real EC2 does with DeleteAssociatedSnapshots=True (moto 5.2.1 accepts and ignores it)."""
    from moto.core.responses import ActionResult
    from moto.ec2.responses.amis import AmisResponse

    def deregister_image(self):
        ami_id = self._get_param("ImageId")
        ami = self.ec2_backend.describe_images(ami_ids=[ami_id])[0]
        snapshots = [m["Ebs"]["SnapshotId"] for m in ami.block_device_mappings_as_dicts()] \
            if hasattr(ami, "block_device_mappings_as_dicts") else [ami.ebs_snapshot.id]
        self.ec2_backend.deregister_image(ami_id)
        results = []
        if self._get_bool_param("DeleteAssociatedSnapshots", False):
            for snapshot_id in snapshots:
                self.ec2_backend.delete_snapshot(snapshot_id)
                results.append({"SnapshotId": snapshot_id, "ReturnCode": "success"})
        return ActionResult({"Return": True, "DeleteSnapshotResults": results})

    monkeypatch.setattr(AmisResponse, "deregister_image", deregister_image)


def test_deregister_deletes_the_snapshots_with_the_image(provider, ec2, aws, master, monkeypatch):
    cluster, node = master
    image = provider.bake(cluster, node, KEY)
    deregister_deletes_snapshots(monkeypatch)
    aws.clear()
    removed = provider.remove_image(image.id)
    assert removed.items == {"image": [image.id], "snapshot": list(image.snapshots)}
    request = next(p for _, op, p in aws.calls if op == "DeregisterImage")
    assert request == {"ImageId": image.id, "DeleteAssociatedSnapshots": True}
    assert "DeleteSnapshot" not in aws.ops()
    assert cluster_snapshots(ec2) == []
