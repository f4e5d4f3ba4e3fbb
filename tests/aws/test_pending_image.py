"""An image an earlier `up` is still baking: `plan` says so without waiting or touching it; `up` waits
only while that is quicker than configuring from the base, and bakes again when the bake failed."""
from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_helpers import UBUNTU_AMI, instances, own_images, seed_cached_image, stock_image_key, write_config
from moto.ec2.models import ec2_backends
from moto.ec2.models.elastic_block_store import Snapshot

from xeoncluster.providers.aws.images import TAG_CONFIGURE_SECONDS

PROGRESS: dict[str, str] = {}


@pytest.fixture(autouse=True)
def snapshot_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's snapshots are always 100% done; EBS reports how far a pending one is."""
    monkeypatch.setattr(Snapshot, "progress", property(lambda self: PROGRESS.get(self.id, "100%")))


def baking(ec2: Any, progress: str, configure_seconds: int | None, state: str = "pending",
           started_ago: float = 60) -> str:
    """An image of the stock key left baking by an earlier up: `started_ago` seconds in, `progress` done."""
    image_id = seed_cached_image(ec2, stock_image_key(), baked_by="earlier")
    if configure_seconds is not None:
        ec2.create_tags(Resources=[image_id], Tags=[{"Key": TAG_CONFIGURE_SECONDS, "Value": str(configure_seconds)}])
    ami = ec2_backends["123456789012"]["us-east-1"].amis[image_id]
    ami.state = state
    ami.creation_date = datetime.now(UTC) - timedelta(seconds=started_ago)
    PROGRESS[ami.ebs_snapshot.id] = progress
    return image_id


def test_plan_says_an_image_is_being_baked_without_waiting_or_touching_it(xc, ec2, aws, xc_home, shell):
    image = baking(ec2, "25%", configure_seconds=30)  # 60 s for 25%: about 180 s left, configuring takes 30 s
    aws.clear()
    started = time.monotonic()
    run = xc("plan", "--nodes", "2")
    assert run.code == 0, run.err
    assert time.monotonic() - started < 5
    assert re.search(rf"image: {image} is being baked \(25% done, about 1[89]\ds left\); up starts every node from "
                     r"the base image instead \(configuring from the base took 30s\)", run.out), run.out
    assert aws.mutating(service=None) == [] and shell.calls == []
    assert "DescribeSnapshots" in aws.ops("ec2")


def test_plan_says_a_bake_failed_and_leaves_the_image_to_up(xc, ec2, aws, xc_home, shell):
    failed = baking(ec2, "10%", configure_seconds=30, state="failed")
    aws.clear()
    run = xc("plan", "--nodes", "2")
    assert f"image: {failed} of this key failed to bake; up removes it and bakes again" in run.out
    assert failed in {i["ImageId"] for i in own_images(ec2)}  # plan removed nothing
    assert aws.mutating(service=None) == [] and shell.calls == []


def test_up_starts_from_the_base_when_waiting_would_take_longer(xc, ec2, aws):
    write_config("image_strategy: parallel\n")
    image = baking(ec2, "25%", configure_seconds=30)
    aws.clear()
    run = xc("up", "--name", "t1", "--nodes", "2")
    assert run.code == 0, run.err
    assert "CreateImage" not in aws.mutating()  # the pending bake serves later ups
    assert {i["ImageId"] for i in instances(ec2, "t1")} == {UBUNTU_AMI}
    assert f"image {image} is still being baked; every node starts from the base image" in run.err
    assert "==> configure nodes (playbooks)" in run.err


def test_up_waits_for_an_image_that_is_nearly_done_and_reuses_it(xc, ec2, aws, monkeypatch):
    write_config("image_strategy: parallel\n")
    image = baking(ec2, "95%", configure_seconds=300)  # about 3 s left against 300 s of configuring
    real = ec2_backends["123456789012"]["us-east-1"].describe_images

    def finish_on_wait(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ami_ids", args[0] if args else None) == [image]:  # the waiter asks for this image alone
            ec2_backends["123456789012"]["us-east-1"].amis[image].state = "available"
        return real(*args, **kwargs)

    aws.clear()
    monkeypatch.setattr(ec2_backends["123456789012"]["us-east-1"], "describe_images", finish_on_wait)
    run = xc("up", "--name", "t1", "--nodes", "2")
    assert run.code == 0, run.err
    assert f"image {image} is being baked by an earlier up; waiting up to 300s for it" in run.err
    assert {i["ImageId"] for i in instances(ec2, "t1")} == {image}
    assert "CreateImage" not in aws.mutating() and "configure nodes" not in run.err


def test_up_removes_a_failed_bake_and_bakes_again(xc, ec2, aws):
    write_config("image_strategy: parallel\n")
    failed = baking(ec2, "40%", configure_seconds=30, state="failed")
    run = xc("up", "--name", "t1", "--nodes", "2")
    assert run.code == 0, run.err
    assert f"image {failed} of this key failed to bake; removing it and baking again" in run.err
    assert failed not in {i["ImageId"] for i in own_images(ec2)}
    assert "CreateImage" in aws.mutating()
