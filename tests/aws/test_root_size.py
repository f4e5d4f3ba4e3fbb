"""Root volumes: images are baked from a small root so any later root_volume_gib fits them.

EC2 refuses to restore a snapshot onto a smaller volume (InvalidBlockDeviceMapping); moto does not,
so `ec2_checks_volume_sizes` makes moto's RunInstances refuse it as EC2 does.
"""
from __future__ import annotations

import pytest
from aws_helpers import PUBLIC_KEY, live_state, nothing_left, own_images, write_config

from xeoncluster.providers.aws.images import BAKE_ROOT_GIB
from xeoncluster.providers.base import LaunchRequest


@pytest.fixture
def ec2_checks_volume_sizes(monkeypatch):
    """An image's snapshot is as large as the root volume it was taken from, and RunInstances refuses a
    smaller VolumeSize for it, as EC2 does (moto keeps neither)."""
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models import EC2Backend

    snapshot_gib: dict[str, int] = {}
    real_create, real_run = EC2Backend.create_image, EC2Backend.run_instances

    def create_image(self, instance_id, *args, **kwargs):
        image = real_create(self, instance_id, *args, **kwargs)
        volumes = self.get_instance(instance_id).block_device_mapping.values()
        snapshot_gib[image.id] = max((int(v.size) for v in volumes), default=0)
        return image

    def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):
        for mapping in kwargs.get("block_device_mappings") or []:
            size = int(mapping.get("Ebs", {}).get("VolumeSize", 0))
            if size and size < snapshot_gib.get(image_id, 0):
                raise EC2ClientError("InvalidBlockDeviceMapping", f"Volume of size {size}GB is smaller than "
                                     f"snapshot, expect size >= {snapshot_gib[image_id]}GB")
        return real_run(self, image_id, count, user_data, security_group_names, **kwargs)

    monkeypatch.setattr(EC2Backend, "create_image", create_image)
    monkeypatch.setattr(EC2Backend, "run_instances", run_instances)
    return snapshot_gib


def root_sizes(aws):
    return [(p["MinCount"], p["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]) for _, op, p in aws.calls
            if op == "RunInstances"]


def test_a_smaller_root_later_still_fits_the_cached_image(xc, ec2, aws, ec2_checks_volume_sizes):
    write_config("aws:\n  root_volume_gib: 100\n")
    first = xc("up", "--name", "t1", "--nodes", "2")
    assert first.code == 0, first.err
    assert root_sizes(aws) == [(1, BAKE_ROOT_GIB), (1, 100)]  # the master baked small, the worker at 100
    grown = [p for _, op, p in aws.calls if op == "ModifyVolume"]
    assert [p["Size"] for p in grown] == [100]
    assert "grow the master's disk to 100 GiB" in first.err
    [image] = own_images(ec2, "t1")
    assert ec2_checks_volume_sizes[image["ImageId"]] == BAKE_ROOT_GIB
    assert xc("down", "--name", "t1").code == 0
    aws.clear()
    write_config("aws:\n  root_volume_gib: 50\n")
    again = xc("up", "--name", "t2", "--nodes", "2")
    assert again.code == 0, again.err
    assert root_sizes(aws) == [(1, 50), (1, 50)]
    assert xc("down", "--name", "t2").code == 0
    assert nothing_left(live_state(ec2, "t2"))


def test_a_root_smaller_than_the_image_is_refused_before_anything_exists(xc, aws, xc_home):
    write_config(f"aws:\n  root_volume_gib: {BAKE_ROOT_GIB - 4}\n")
    run = xc("up", "--name", "t1", "--nodes", "2")
    assert run.code == 2
    assert run.error == (f"error: aws.root_volume_gib: {BAKE_ROOT_GIB - 4} GiB is smaller than the images xeoncluster "
                         f"bakes ({BAKE_ROOT_GIB} GiB) | hint: set aws.root_volume_gib: {BAKE_ROOT_GIB} or more")
    assert aws.mutating(service=None) == []


def test_growing_a_root_that_is_already_large_enough_says_so_and_modifies_nothing(provider, cluster, events, aws):
    provider.prepare(cluster, PUBLIC_KEY)
    [node] = provider.launch(LaunchRequest(cluster, 1, None, "master", 0, root_gib=20))
    aws.clear()
    cluster.aws.root_volume_gib = 20
    assert provider.grow_root(cluster, node)
    assert "ModifyVolume" not in aws.mutating()
    assert events[-1] == "root volume of node0 is already 20 GiB"
