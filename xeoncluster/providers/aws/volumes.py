"""Root volumes: find an instance's root EBS volume and grow it in place (ModifyVolume)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from xeoncluster.core.errors import ProviderError

# The new size is usable by the instance once the modification leaves the `modifying` state.
GROWN_STATES = ("optimizing", "completed")


def root_volume(ec2: Any, instance_id: str) -> tuple[str, int]:
    """(volume id, size in GiB) of the instance's root device."""
    instance = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    root = instance.get("RootDeviceName")
    for mapping in instance.get("BlockDeviceMappings", []):
        if mapping.get("DeviceName") == root and "Ebs" in mapping:
            volume_id = mapping["Ebs"]["VolumeId"]
            size = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["Size"]
            return str(volume_id), int(size)
    raise ProviderError(f"{instance_id} has no EBS root volume to grow")


def grow_volume(ec2: Any, volume_id: str, gib: int, wait: dict[str, int],
                sleep: Callable[[float], None] = time.sleep) -> None:
    ec2.modify_volume(VolumeId=volume_id, Size=gib)
    for _ in range(max(1, wait.get("MaxAttempts", 120))):
        found = ec2.describe_volumes_modifications(VolumeIds=[volume_id])["VolumesModifications"]
        state = found[0].get("ModificationState") if found else None
        if state in GROWN_STATES:
            return
        if state == "failed":
            raise ProviderError(f"growing {volume_id} to {gib} GiB failed: {found[0].get('StatusMessage', '')}")
        sleep(wait.get("Delay", 5))
    raise ProviderError(f"growing {volume_id} to {gib} GiB did not finish in time")


def grow_root(ec2: Any, instance_id: str, gib: int, wait: dict[str, int],
              sleep: Callable[[float], None] = time.sleep) -> int:
    """Grows the instance's root volume to `gib` unless it is that large already; the size it had."""
    volume_id, size = root_volume(ec2, instance_id)
    if size < gib:
        grow_volume(ec2, volume_id, gib, wait, sleep)
    return size
