"""The IAM gate's `Lookup` over moto's in-process backends (the daemon runs moto in the same process):
tags and condition keys of EC2 resources, roles, instance profiles and bucket owners.

Anything moto does not know (a resource that does not exist, a kind it does not model) is answered
as "nothing": the request then fails in moto itself, or a policy that needs the key refuses it."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xeoncluster.standin.ec2_errors import ACCOUNT
from xeoncluster.standin.iam_lookup import Lookup, RoleFacts
from xeoncluster.standin.iam_policy import Values
from xeoncluster.standin.placement_groups import PlacementGroups

PARTITION = "aws"


@dataclass(frozen=True)
class MotoLookup(Lookup):
    region: str
    placement: PlacementGroups | None = None  # the stand-in keeps placement groups itself

    def _ec2(self) -> Any:
        from moto.ec2.models import ec2_backends

        return ec2_backends[ACCOUNT][self.region]

    def _iam(self) -> Any:
        from moto.iam.models import iam_backends

        return iam_backends[ACCOUNT][PARTITION]

    def tags(self, kind: str, ref: str) -> Mapping[str, str]:
        if kind == "placement-group":
            return self._placement_tags(ref)
        if kind == "key-pair":
            pair = self._ec2().key_pairs.get(ref)
            ref = pair.id if pair is not None else ref
        found = self._ec2().describe_tags(filters={"resource-id": [ref]})
        return {tag["key"]: tag["value"] for tag in found}

    def _placement_tags(self, name: str) -> Mapping[str, str]:
        if self.placement is None:
            return {}
        groups = self.placement.describe(self.region, [name], {})
        return {t["Key"]: t["Value"] for g in groups for t in g["Tags"]}

    def keys(self, kind: str, ref: str) -> Mapping[str, Values]:
        try:
            found = _KEYS[kind](self._ec2(), ref) if kind in _KEYS else {}
        except Exception:  # noqa: BLE001 - moto's not-found errors differ per kind; unknown means no keys
            return {}
        return {key: [str(value)] for key, value in found.items() if value is not None}

    def role(self, name: str) -> RoleFacts | None:
        try:
            role = self._iam().get_role(name)
        except Exception:  # noqa: BLE001 - moto raises its own not-found types
            return None
        return RoleFacts(str(role.arn), role.permissions_boundary_arn or None,
                         {t["Key"]: t["Value"] for t in role.tags})

    def profile_role(self, profile: str) -> str | None:
        iam = self._iam()
        try:
            found = iam.get_instance_profile_by_arn(profile) if profile.startswith("arn:") \
                else iam.get_instance_profile(profile)
        except Exception:  # noqa: BLE001 - moto raises its own not-found types
            return None
        return str(found.roles[0].arn) if found.roles else None

    def profile_tags(self, profile: str) -> Mapping[str, str]:
        found = self._iam().instance_profiles.get(profile)
        return {t["Key"]: t["Value"] for t in found.tags} if found is not None else {}

    def bucket_account(self, bucket: str) -> str | None:
        from moto.s3.models import s3_backends

        owner = s3_backends.bucket_accounts.get(bucket)
        return owner[1] if owner else None


def _instance(ec2: Any, ref: str) -> dict[str, Any]:
    instance = ec2.get_instance(ref)
    association = ec2.iam_instance_profile_associations.get(ref)
    return {"ec2:InstanceType": instance.instance_type, "ec2:AvailabilityZone": instance._placement.zone,
            "ec2:InstanceProfile": association.iam_instance_profile.arn if association is not None else None,
            "ec2:Tenancy": "default", "ec2:RootDeviceType": instance.root_device_type}


def _image(ec2: Any, ref: str) -> dict[str, Any]:
    ami = ec2.amis[ref]
    return {"ec2:Owner": ami.owner_id, "ec2:Public": str(bool(ami.is_public)).lower(),
            "ec2:ImageType": "machine", "ec2:RootDeviceType": ami.root_device_type}


def _subnet(ec2: Any, ref: str) -> dict[str, Any]:
    subnet = ec2.get_subnet(ref)
    return {"ec2:Vpc": f"arn:aws:ec2:{ec2.region_name}:{ACCOUNT}:vpc/{subnet.vpc_id}",
            "ec2:AvailabilityZone": subnet.availability_zone, "ec2:SubnetID": subnet.id}


def _security_group(ec2: Any, ref: str) -> dict[str, Any]:
    group = ec2.get_security_group_from_id(ref)
    vpc = f"arn:aws:ec2:{ec2.region_name}:{ACCOUNT}:vpc/{group.vpc_id}" if group and group.vpc_id else None
    return {"ec2:Vpc": vpc, "ec2:SecurityGroupID": ref}


def _volume(ec2: Any, ref: str) -> dict[str, Any]:
    volume = ec2.get_volume(ref)
    return {"ec2:VolumeSize": volume.size, "ec2:VolumeType": volume.volume_type,
            "ec2:Encrypted": str(bool(volume.encrypted)).lower(), "ec2:AvailabilityZone": volume.zone.name}


def _snapshot(ec2: Any, ref: str) -> dict[str, Any]:
    snapshot = ec2.get_snapshot(ref)
    return {"ec2:Owner": snapshot.owner_id, "ec2:VolumeSize": snapshot.volume.size}


_KEYS = {"instance": _instance, "image": _image, "subnet": _subnet, "security-group": _security_group,
         "volume": _volume, "snapshot": _snapshot,
         "key-pair": lambda ec2, ref: {"ec2:KeyPairName": ref},
         "placement-group": lambda ec2, ref: {"ec2:PlacementGroupName": ref}}
