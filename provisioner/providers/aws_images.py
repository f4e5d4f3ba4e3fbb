"""AMIs: the Ubuntu base from SSM, cached images found by key, bake, and removal with snapshots."""
from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError

from ..errors import ConfigError, ProviderError
from .aws_clients import (cluster_tags, error_code, guarded, image_key_filter, paginate, tag_specs,
                          tags_of)
from .base import TAG_CLUSTER, TAG_IMAGE_KEY, Image, Removed

BASE_IMAGE_PARAMETER = "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"
ACTIVE_IMAGE_STATES = ("available", "pending")


def base_image_id(ssm: Any) -> str:
    try:
        return str(ssm.get_parameter(Name=BASE_IMAGE_PARAMETER)["Parameter"]["Value"])
    except ClientError as exc:
        if error_code(exc) == "ParameterNotFound":
            raise ConfigError(f"no Ubuntu 24.04 image published in {ssm.meta.region_name} "
                              f"(SSM parameter {BASE_IMAGE_PARAMETER} missing)",
                              hint="choose another region, or set image: to an AMI id") from None
        raise


def describe_image(ec2: Any, image_id: str) -> dict[str, Any] | None:
    try:
        images = ec2.describe_images(ImageIds=[image_id])["Images"]
    except ClientError as exc:
        if error_code(exc) in ("InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable"):
            return None
        raise
    return images[0] if images else None


def to_image(raw: dict[str, Any]) -> Image:
    tags = tags_of(raw)
    snapshots = tuple(m["Ebs"]["SnapshotId"] for m in raw.get("BlockDeviceMappings", [])
                      if m.get("Ebs", {}).get("SnapshotId"))
    size = sum(int(m["Ebs"].get("VolumeSize", 0)) for m in raw.get("BlockDeviceMappings", []) if "Ebs" in m)
    return Image(id=raw["ImageId"], key=tags.get(TAG_IMAGE_KEY, ""), name=raw.get("Name", ""),
                 created=raw.get("CreationDate"), cluster=tags.get(TAG_CLUSTER),
                 snapshots=snapshots, size_bytes=size * 2**30 if size else None)


def find_image(ec2: Any, key: str) -> Image | None:
    found = ec2.describe_images(Owners=["self"], Filters=image_key_filter(key) + [
        {"Name": "state", "Values": ["available"]}])["Images"]
    if not found:
        return None
    return to_image(max(found, key=lambda i: i.get("CreationDate", "")))


def own_images(ec2: Any) -> list[Image]:
    found = ec2.describe_images(Owners=["self"], Filters=[{"Name": "tag-key", "Values": [TAG_IMAGE_KEY]}])["Images"]
    return sorted((to_image(i) for i in found), key=lambda i: i.created or "", reverse=True)


def image_name(cluster: str, key: str) -> str:
    # AMI names are unique per account and region; the timestamp lets one key be re-baked.
    return f"xeoncluster-{key[:16]}-{cluster}-{int(time.time())}"


def bake(ec2: Any, cluster: str, instance_id: str, key: str, wait: dict[str, int]) -> Image:
    tags = cluster_tags(cluster, "image", **{TAG_IMAGE_KEY: key, "Name": f"xeoncluster-{key[:16]}"})
    made = guarded(f"creating an image of {instance_id}", lambda: ec2.create_image(
        InstanceId=instance_id, Name=image_name(cluster, key), NoReboot=True,
        Description=f"xeoncluster image {key[:16]}", TagSpecifications=tag_specs(tags, "image", "snapshot")))
    image_id = made["ImageId"]
    try:
        ec2.get_waiter("image_available").wait(ImageIds=[image_id], WaiterConfig=wait)
        raw = describe_image(ec2, image_id)
    except BaseException:
        # A half-made image would be found by key later and reused: remove it there and then.
        _remove_quietly(ec2, image_id)
        raise
    if raw is None:
        raise ProviderError(f"image {image_id} disappeared right after it was created")
    return to_image(raw)


def _remove_quietly(ec2: Any, image_id: str) -> None:
    try:
        remove_image(ec2, image_id)
    except Exception:  # noqa: BLE001 - the original error matters more than the clean-up one
        pass


def remove_image(ec2: Any, image_id: str) -> Removed:
    raw = describe_image(ec2, image_id)
    if raw is None:
        return Removed({"image": [], "snapshot": []})
    snapshots = list(to_image(raw).snapshots)
    guarded(f"deregistering {image_id}", lambda: ec2.deregister_image(ImageId=image_id))
    deleted = [s for s in snapshots if _delete_snapshot(ec2, s)]
    return Removed({"image": [image_id], "snapshot": deleted})


def _delete_snapshot(ec2: Any, snapshot_id: str) -> bool:
    try:
        ec2.delete_snapshot(SnapshotId=snapshot_id)
    except ClientError as exc:
        if error_code(exc) == "InvalidSnapshot.NotFound":
            return False
        raise ProviderError(f"deleting snapshot {snapshot_id}: {exc}") from exc
    return True


def purge_images(ec2: Any, cluster: str) -> Removed:
    found = ec2.describe_images(Owners=["self"], Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}])["Images"]
    removed = Removed({"image": [], "snapshot": []})
    for raw in found:
        removed = removed.merge(remove_image(ec2, raw["ImageId"]))
    # Snapshots whose AMI is already gone (e.g. a deregister that got interrupted).
    orphans = paginate(ec2, "describe_snapshots", "Snapshots", OwnerIds=["self"],
                       Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}])
    leftover = [s["SnapshotId"] for s in orphans if s["SnapshotId"] not in removed.items["snapshot"]]
    return removed.merge(Removed({"snapshot": [s for s in leftover if _delete_snapshot(ec2, s)]}))
