"""AMIs: the Ubuntu base from SSM, cached images found by key, bake, and removal with snapshots."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers.aws.clients import (
    cluster_filter,
    cluster_tags,
    error_code,
    error_text,
    guarded,
    image_key_filter,
    paginate,
    provider_error,
    tag_specs,
    tags_of,
)
from xeoncluster.providers.base import TAG_CLUSTER, TAG_IMAGE_KEY, TAG_OWNER, Image, PendingImage, Removed

TAG_CONFIGURE_SECONDS = "xeoncluster:configure-seconds"
BASE_IMAGE_PARAMETER = "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"
ACTIVE_IMAGE_STATES = ("available", "pending")
# Baked images are taken from a master launched with this root, and every later node grows it at
# launch: a snapshot can never be restored onto a smaller volume, so the image must stay small.
BAKE_ROOT_GIB = 16
IMAGE_GONE_CODES = ("InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable")
# Seconds between deregister attempts of an image EC2 does not show yet (just after CreateImage).
NOT_YET_VISIBLE_DELAYS = (2, 4, 8)
# Seconds between DeleteSnapshot attempts while EC2 still counts the snapshot as in use by the
# image just deregistered.
SNAPSHOT_IN_USE_DELAYS = (2, 4, 8, 15, 30)


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
        if error_code(exc) in IMAGE_GONE_CODES:
            return None
        raise
    return images[0] if images else None


def image_gib(raw: dict[str, Any]) -> int:
    return sum(int(m["Ebs"].get("VolumeSize", 0)) for m in raw.get("BlockDeviceMappings", []) if "Ebs" in m)


def to_image(raw: dict[str, Any]) -> Image:
    tags = tags_of(raw)
    snapshots = tuple(m["Ebs"]["SnapshotId"] for m in raw.get("BlockDeviceMappings", [])
                      if m.get("Ebs", {}).get("SnapshotId"))
    size = sum(int(m["Ebs"].get("VolumeSize", 0)) for m in raw.get("BlockDeviceMappings", []) if "Ebs" in m)
    return Image(id=raw["ImageId"], key=tags.get(TAG_IMAGE_KEY, ""), name=raw.get("Name", ""),
                 created=raw.get("CreationDate"), cluster=tags.get(TAG_CLUSTER), owner=tags.get(TAG_OWNER),
                 snapshots=snapshots, size_bytes=size * 2**30 if size else None)


def keyed_images(ec2: Any, key: str, states: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every image of the account tagged with `key`, whoever made it: the key is a digest of public
    inputs, the same for every user of this version in a region, and any user may tag an image with it."""
    return list(ec2.describe_images(Owners=["self"], Filters=[
        *image_key_filter(key), {"Name": "state", "Values": list(states)}])["Images"])


def made_by(raw: dict[str, Any], owner: str) -> bool:
    """The image's owner tag is `owner`, exactly: the user's policy sets that tag only at creation and only
    to the caller's own id, so a colleague cannot make an image that passes for ours."""
    return tags_of(raw).get(TAG_OWNER, "") == owner


def find_image(ec2: Any, key: str, owner: str) -> tuple[Image | None, list[Image]]:
    """The newest usable image of `key` that `owner` made, and the images of `key` another identity made: a
    colleague's is never ours, and is named so the user knows why none is reused. One DescribeImages."""
    found = keyed_images(ec2, key, ACTIVE_IMAGE_STATES)
    mine = [i for i in found if made_by(i, owner) and i.get("State") == "available"]
    newest = to_image(max(mine, key=lambda i: i.get("CreationDate", ""))) if mine else None
    return newest, [to_image(i) for i in found if not made_by(i, owner)]


def pending_image(ec2: Any, key: str, owner: str) -> PendingImage | None:
    """The newest image of this key that `owner` is still making, or whose making failed (a bake an earlier
    `up` left running in the background), with how far its snapshots are. Read-only."""
    found = [i for i in keyed_images(ec2, key, ("pending", "failed")) if made_by(i, owner)]
    if not found:
        return None
    # One still baking serves later ups; a failed one only needs removing.
    raw = max(found, key=lambda i: (i.get("State") == "pending", i.get("CreationDate", "")))
    configure = tags_of(raw).get(TAG_CONFIGURE_SECONDS)
    return PendingImage(str(raw["ImageId"]), key, _epoch(raw.get("CreationDate")), _progress(ec2, raw),
                        float(configure) if configure else None, failed=raw.get("State") == "failed")


def _progress(ec2: Any, raw: dict[str, Any]) -> float | None:
    """The least advanced of the image's snapshots, as EBS reports it ("45%")."""
    ids = [m["Ebs"]["SnapshotId"] for m in raw.get("BlockDeviceMappings", []) if m.get("Ebs", {}).get("SnapshotId")]
    if not ids:
        return None
    try:
        snapshots = ec2.describe_snapshots(SnapshotIds=ids)["Snapshots"]
    except ClientError:
        return None  # not visible yet: nothing can be said about its progress
    shares = [float(str(s.get("Progress", "")).rstrip("%")) / 100 for s in snapshots
              if str(s.get("Progress", "")).rstrip("%").replace(".", "", 1).isdigit()]
    return min(shares) if shares else None


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def start_bake(ec2: Any, cluster: str, instance_id: str, key: str, owner: str,
               configure_seconds: float | None = None) -> str:
    """CreateImage and return at once; EC2 finishes the image in the background. `configure_seconds`
    (what configuring a node from the base took) lets a later `up` judge whether waiting pays."""
    extra = {TAG_CONFIGURE_SECONDS: f"{configure_seconds:.0f}"} if configure_seconds is not None else {}
    tags = cluster_tags(cluster, "image", owner, **{TAG_IMAGE_KEY: key, "Name": f"xeoncluster-{key[:16]}"}, **extra)
    made = guarded(f"creating an image of {instance_id}", lambda: ec2.create_image(
        InstanceId=instance_id, Name=image_name(cluster, key), NoReboot=True,
        Description=f"xeoncluster image {key[:16]}", TagSpecifications=tag_specs(tags, "image", "snapshot")))
    return str(made["ImageId"])


def own_images(ec2: Any, owner: str) -> list[Image]:
    """The tool's images that `owner` made (`xeoncluster images`): a colleague's are theirs to list."""
    found = ec2.describe_images(Owners=["self"], Filters=[{"Name": "tag-key", "Values": [TAG_IMAGE_KEY]}])["Images"]
    return sorted((to_image(i) for i in found if made_by(i, owner)), key=lambda i: i.created or "", reverse=True)


def image_name(cluster: str, key: str) -> str:
    # AMI names are unique per account and region; the timestamp lets one key be re-baked.
    return f"xeoncluster-{key[:16]}-{cluster}-{int(time.time())}"


def bake(ec2: Any, cluster: str, instance_id: str, key: str, owner: str, wait: dict[str, int],
         sleep: Callable[[float], None] = time.sleep, on_snapshot: Callable[[], None] | None = None) -> Image:
    image_id = start_bake(ec2, cluster, instance_id, key, owner)
    try:
        # EBS snapshots are point-in-time at CreateImage: the instance may change from here on.
        if on_snapshot is not None:
            on_snapshot()
        raw = _wait_until_available(ec2, image_id, wait)
    except BaseException:
        # A half-made image would be found by key later and reused: remove it there and then, by
        # the id create_image gave, as describe may not see the image yet.
        _remove_quietly(ec2, image_id, sleep)
        raise
    return to_image(raw)


def _wait_until_available(ec2: Any, image_id: str, wait: dict[str, int]) -> dict[str, Any]:
    # EC2 answers InvalidAMIID.NotFound for a moment after CreateImage: image_available fails at
    # once on that error, image_exists retries it.
    ec2.get_waiter("image_exists").wait(ImageIds=[image_id], WaiterConfig=wait)
    ec2.get_waiter("image_available").wait(ImageIds=[image_id], WaiterConfig=wait)
    raw = describe_image(ec2, image_id)
    if raw is None:
        raise ProviderError(f"image {image_id} disappeared right after it was created")
    return raw


def _remove_quietly(ec2: Any, image_id: str, sleep: Callable[[float], None]) -> None:
    with contextlib.suppress(Exception):  # the original error matters more than the clean-up one
        remove_image(ec2, image_id, sleep, not_found_delays=NOT_YET_VISIBLE_DELAYS)


def remove_image(ec2: Any, image_id: str, sleep: Callable[[float], None] = time.sleep,
                 not_found_delays: tuple[float, ...] = ()) -> Removed:
    """Deregister by id even when describe does not see the image; `not_found_delays` retries a
    NotFound deregister, for an image that was created a moment ago."""
    raw = describe_image(ec2, image_id)
    snapshots = list(to_image(raw).snapshots) if raw else snapshots_made_for(ec2, image_id)
    reply = _deregister(ec2, image_id, sleep, not_found_delays)
    if reply is None:
        return Removed({"image": [], "snapshot": [s for s in snapshots if delete_snapshot(ec2, s, sleep)]})
    # EC2 reports which snapshots DeleteAssociatedSnapshots removed; the rest (or all, where the
    # API ignores the flag) are deleted one by one.
    gone = [r["SnapshotId"] for r in reply.get("DeleteSnapshotResults", []) if r.get("ReturnCode") == "success"]
    deleted = [s for s in snapshots if s in gone or delete_snapshot(ec2, s, sleep)]
    return Removed({"image": [image_id], "snapshot": deleted})


def snapshots_made_for(ec2: Any, image_id: str) -> list[str]:
    # CreateImage describes each snapshot as "Created by CreateImage(i-...) for ami-...".
    found = paginate(ec2, "describe_snapshots", "Snapshots", OwnerIds=["self"],
                     Filters=[{"Name": "description", "Values": [f"*{image_id}*"]}])
    return [s["SnapshotId"] for s in found]


def _deregister(ec2: Any, image_id: str, sleep: Callable[[float], None],
                not_found_delays: tuple[float, ...]) -> dict[str, Any] | None:
    """The DeregisterImage reply, or None if there was no such image."""
    for delay in (*not_found_delays, None):
        try:
            return dict(ec2.deregister_image(ImageId=image_id, DeleteAssociatedSnapshots=True))
        except ClientError as exc:
            if error_code(exc) not in IMAGE_GONE_CODES:
                raise provider_error(f"deregistering {image_id}", exc) from exc
            if delay is None or error_code(exc) != "InvalidAMIID.NotFound":
                return None
            sleep(delay)
    raise AssertionError("unreachable")


def delete_snapshot(ec2: Any, snapshot_id: str, sleep: Callable[[float], None]) -> bool:
    """True if deleted, False if already gone. EC2 answers InvalidSnapshot.InUse for a while after
    the image that used the snapshot is deregistered, so that is retried with backoff."""
    for delay in (*SNAPSHOT_IN_USE_DELAYS, None):
        try:
            ec2.delete_snapshot(SnapshotId=snapshot_id)
            return True
        except ClientError as exc:
            code = error_code(exc)
            if code == "InvalidSnapshot.NotFound":
                return False
            if code != "InvalidSnapshot.InUse":
                raise provider_error(f"deleting snapshot {snapshot_id}", exc) from exc
            if delay is None:
                raise ProviderError(f"deleting snapshot {snapshot_id}: {error_text(exc)}",
                                    hint="run the command again in a minute; it removes only what is left") from exc
            sleep(delay)
    raise AssertionError("unreachable")


def purge_images(ec2: Any, cluster: str, sleep: Callable[[float], None] = time.sleep, owner: str = "") -> Removed:
    """The images `cluster` baked for `owner` ("": any), and their snapshots: an image a colleague's
    cluster of the same name baked is theirs."""
    mine = cluster_filter(cluster, owner)
    found = ec2.describe_images(Owners=["self"], Filters=mine)["Images"]
    removed = Removed({"image": [], "snapshot": []})
    for raw in found:
        removed = removed.merge(remove_image(ec2, raw["ImageId"], sleep))
    # Snapshots whose AMI is already gone (e.g. a deregister that got interrupted).
    orphans = paginate(ec2, "describe_snapshots", "Snapshots", OwnerIds=["self"], Filters=mine)
    leftover = [s["SnapshotId"] for s in orphans if s["SnapshotId"] not in removed.items["snapshot"]]
    return removed.merge(Removed({"snapshot": [s for s in leftover if delete_snapshot(ec2, s, sleep)]}))
