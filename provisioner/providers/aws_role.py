"""The master's IAM role: what the run agent on node0 may do, and nothing more.

The agent replaces lost workers and removes an idle cluster with these credentials, which EC2's
instance metadata hands to the master alone; no credential ever leaves the user's machine. Every
permission is scoped to this cluster: instances it launches must carry the cluster's tag and use
the cluster's own security group, subnets and images, and it may terminate or tag only instances
that already carry that tag. Storage access is limited to the cluster's own prefix.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from .aws_clients import error_code
from .base import TAG_CLUSTER, TAG_IMAGE_KEY

# Describe calls have no resource-level permissions; GetConsoleOutput reads a new node's host keys.
READ_ACTIONS = (
    "ec2:DescribeInstances", "ec2:DescribeImages", "ec2:DescribeSubnets", "ec2:DescribeVpcs",
    "ec2:DescribeSecurityGroups", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
    "ec2:DescribeAvailabilityZones", "ec2:DescribeSpotPriceHistory", "ec2:DescribeSpotInstanceRequests",
    "ec2:DescribePlacementGroups", "ec2:GetConsoleOutput", "pricing:GetProducts",
)
CREATED_BY_LAUNCH = ("instance", "volume", "spot-instances-request")
TRUST = {"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
POLICY_NAME = "xeoncluster-agent"


@dataclass(frozen=True)
class RoleScope:
    """What the master's role is scoped to: this cluster's tag, network, images and storage prefix."""

    cluster: str
    region: str
    account: str
    security_group_id: str
    subnet_ids: tuple[str, ...]
    base_image: str | None       # the AMI nodes start from before any bake
    image_key: str | None        # images of this key (baked by any cluster) serve this cluster
    storage: tuple[str, str] | None = None  # (bucket, prefix) on S3

    def arn(self, kind: str, name: str) -> str:
        owner = "" if kind == "image" else self.account
        return f"arn:aws:ec2:{self.region}:{owner}:{kind}/{name}"


def role_name(cluster: str, region: str) -> str:
    """IAM names are global to the account; clusters of one name may exist in several regions."""
    return f"xeoncluster-{cluster}-{region}"


def master_policy(scope: RoleScope) -> dict[str, Any]:
    tagged = {"StringEquals": {f"aws:RequestTag/{TAG_CLUSTER}": scope.cluster}}
    owned = {"StringEquals": {f"ec2:ResourceTag/{TAG_CLUSTER}": scope.cluster}}
    used = ([scope.arn("security-group", scope.security_group_id)] + [scope.arn("subnet", s) for s in scope.subnet_ids]
            + [scope.arn("key-pair", f"xeoncluster-{scope.cluster}"),
               scope.arn("placement-group", f"xeoncluster-{scope.cluster}")]
            + ([scope.arn("image", scope.base_image)] if scope.base_image else []))
    statements: list[dict[str, Any]] = [
        _allow("Read", list(READ_ACTIONS), "*"),
        _allow("LaunchTagged", ["ec2:RunInstances"], [scope.arn(k, "*") for k in CREATED_BY_LAUNCH], tagged),
        _allow("LaunchInterface", ["ec2:RunInstances"], [scope.arn("network-interface", "*")]),
        _allow("LaunchWithOwnNetwork", ["ec2:RunInstances"], used),
        _allow("TagOnLaunch", ["ec2:CreateTags"], [scope.arn(k, "*") for k in CREATED_BY_LAUNCH],
               {"StringEquals": {"ec2:CreateAction": "RunInstances",
                                 f"aws:RequestTag/{TAG_CLUSTER}": scope.cluster}}),
        _allow("OwnInstancesOnly", ["ec2:TerminateInstances", "ec2:CreateTags"], [scope.arn("instance", "*")], owned),
    ]
    if scope.image_key:
        statements.append(_allow("LaunchFromOwnImages", ["ec2:RunInstances"], [scope.arn("image", "*")],
                                 {"StringEquals": {f"ec2:ResourceTag/{TAG_IMAGE_KEY}": scope.image_key}}))
    if scope.storage is not None:
        statements += _storage_statements(*scope.storage)
    return {"Version": "2012-10-17", "Statement": statements}


def _storage_statements(bucket: str, prefix: str) -> list[dict[str, Any]]:
    below = f"{prefix.rstrip('/')}/*" if prefix else "*"
    return [
        _allow("OwnStorageObjects", ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
               f"arn:aws:s3:::{bucket}/{below}"),
        _allow("OwnStorageListing", ["s3:ListBucket"], f"arn:aws:s3:::{bucket}",
               {"StringLike": {"s3:prefix": [below, prefix.rstrip("/")]}}),
    ]


def _allow(sid: str, actions: list[str], resources: str | list[str],
           condition: dict[str, Any] | None = None) -> dict[str, Any]:
    statement: dict[str, Any] = {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources}
    if condition:
        statement["Condition"] = condition
    return statement


@dataclass(frozen=True)
class RoleResult:
    name: str
    created: bool


def ensure_master_role(iam: Any, scope: RoleScope) -> RoleResult:
    """The role, its policy and an instance profile of the same name; idempotent. The policy is
    written every time: the scope (images, subnets) can change from one `up` to the next."""
    name = role_name(scope.cluster, scope.region)
    tags = [{"Key": TAG_CLUSTER, "Value": scope.cluster}]
    created = _create_if_missing(lambda: iam.create_role(
        RoleName=name, AssumeRolePolicyDocument=json.dumps(TRUST), Tags=tags,
        Description=f"xeoncluster {scope.cluster}: the master's run agent (recovery, idle removal)"))
    iam.put_role_policy(RoleName=name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(master_policy(scope)))
    _create_if_missing(lambda: iam.create_instance_profile(InstanceProfileName=name, Tags=tags))
    profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    if not any(role["RoleName"] == name for role in profile.get("Roles", [])):
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return RoleResult(name, created)


def _create_if_missing(create: Callable[[], Any]) -> bool:
    try:
        create()
    except ClientError as exc:
        if error_code(exc) == "EntityAlreadyExists":
            return False
        raise
    return True


def delete_master_role(iam: Any, cluster: str, region: str) -> list[str]:
    """Remove the profile and the role; idempotent. Returns the names removed."""
    name = role_name(cluster, region)
    removed = []
    try:
        profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        for role in profile.get("Roles", []):
            iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=role["RoleName"])
        iam.delete_instance_profile(InstanceProfileName=name)
        removed.append(f"instance-profile/{name}")
    except ClientError as exc:
        if error_code(exc) != "NoSuchEntity":
            raise
    try:
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=policy)
        iam.delete_role(RoleName=name)
        removed.append(f"role/{name}")
    except ClientError as exc:
        if error_code(exc) != "NoSuchEntity":
            raise
    return removed


def profile_exists(iam: Any, name: str) -> bool:
    try:
        iam.get_instance_profile(InstanceProfileName=name)
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            return False
        raise
    return True
