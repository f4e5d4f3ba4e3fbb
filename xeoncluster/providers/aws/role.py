"""The cluster's IAM role: every node carries it (an instance profile of the same name), and it is
what the run agent may do, on whichever node it runs, and nothing more.

The agent replaces lost nodes and removes an idle cluster with these credentials, which EC2's
instance metadata hands to each node; no credential ever leaves the user's machine. Every node holds
the role, so that the agent may run on any of them and the nodes it launches may launch in turn: the
user's code already runs on every node, so a worker holding it widens nobody's reach. Every
permission is scoped to this cluster: instances it launches must carry the cluster's tag (and only
the tool's tag keys), be of the cluster's instance types, use the cluster's own security group,
subnets and images (Ubuntu, the base `image:` names, or images its owner baked for the cluster's
image key: a colleague's image of the same key is refused), and carry this role and no other (it
may pass only itself, only to EC2); it may terminate or read the console of only instances that
already carry the tag, and tags nothing after launch. What it launches carries the owner tag of the
user who made the cluster (owner.py), so that user may remove it, and no other user may. Storage
access is limited to the cluster's own prefix. The role carries the account's permissions boundary
(boundary.py), the most any role of the tool may do.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from xeoncluster.providers.aws.boundary import boundary_arn
from xeoncluster.providers.aws.clients import TAG_INDEX_BASE, error_code
from xeoncluster.providers.aws.iam_doc import TAG_BASE_IMAGE, Document, allow, deny, document, passed_to_ec2, role_arn
from xeoncluster.providers.base import TAG_CLUSTER, TAG_IMAGE_KEY, TAG_OWNER, TAG_ROLE

# Describe calls and the price list have no resource-level permissions.
READ_ACTIONS = (
    "ec2:DescribeInstances", "ec2:DescribeImages", "ec2:DescribeSubnets", "ec2:DescribeVpcs",
    "ec2:DescribeSecurityGroups", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
    "ec2:DescribeAvailabilityZones", "ec2:DescribeSpotPriceHistory", "ec2:DescribeSpotInstanceRequests",
    "ec2:DescribePlacementGroups", "pricing:GetProducts",
)
CREATED_BY_LAUNCH = ("instance", "volume", "spot-instances-request")
# Every tag key a launch sets (aws_instances.run_request): the role may set these and no other.
LAUNCH_TAG_KEYS = (TAG_CLUSTER, TAG_ROLE, TAG_OWNER, TAG_INDEX_BASE, "Name")
TRUST = {"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
POLICY_NAME = "xeoncluster-agent"


@dataclass(frozen=True)
class RoleScope:
    """What the cluster's role is scoped to: this cluster's tag, network, images and storage prefix."""

    cluster: str
    region: str
    account: str
    security_group_id: str
    subnet_ids: tuple[str, ...]
    base_image: str | None       # the AMI nodes start from before any bake
    image_key: str | None        # images of this key that the owner baked (by any cluster) serve this cluster
    storage: tuple[str, str] | None = None  # (bucket, prefix) on S3
    instance_types: tuple[str, ...] = ()     # the only types it may launch (none: it may launch nothing)
    owner: str | None = None                 # the UserId its launches must be tagged with (who made the cluster)
    through_endpoints: tuple[str, ...] = ()  # services the cluster's subnets reach only through a VPC endpoint

    def arn(self, kind: str, name: str) -> str:
        owner = "" if kind == "image" else self.account
        return f"arn:aws:ec2:{self.region}:{owner}:{kind}/{name}"


def role_name(cluster: str, region: str) -> str:
    """IAM names are global to the account; clusters of one name may exist in several regions."""
    return f"xeoncluster-{cluster}-{region}"


def master_policy(scope: RoleScope) -> Document:
    own_tag = {f"aws:RequestTag/{TAG_CLUSTER}": scope.cluster,
               **({f"aws:RequestTag/{TAG_OWNER}": scope.owner} if scope.owner is not None else {})}
    tool_keys = {"ForAllValues:StringEquals": {"aws:TagKeys": list(LAUNCH_TAG_KEYS)}}
    owned = {"StringEquals": {f"ec2:ResourceTag/{TAG_CLUSTER}": scope.cluster}}
    subnets = [scope.arn("subnet", s) for s in scope.subnet_ids]
    used = ([scope.arn("security-group", scope.security_group_id)] + subnets
            + [scope.arn("key-pair", f"xeoncluster-{scope.cluster}"),
               scope.arn("placement-group", f"xeoncluster-{scope.cluster}")]
            + ([scope.arn("image", scope.base_image)] if scope.base_image else []))
    statements: list[Document] = [
        allow("Read", list(READ_ACTIONS), "*"),
        allow("LaunchConfiguredTypes", ["ec2:RunInstances"], [scope.arn("instance", "*")],
              {"StringEquals": {**own_tag, "ec2:InstanceType": list(scope.instance_types)}, **tool_keys}),
        allow("LaunchTagged", ["ec2:RunInstances"], [scope.arn(k, "*") for k in CREATED_BY_LAUNCH[1:]],
              {"StringEquals": own_tag, **tool_keys}),
        allow("LaunchInterfaceInOwnSubnets", ["ec2:RunInstances"], [scope.arn("network-interface", "*")],
              {"ArnEquals": {"ec2:Subnet": subnets}}),
        allow("LaunchWithOwnNetwork", ["ec2:RunInstances"], used),
        allow("TagOnLaunchOnly", ["ec2:CreateTags"], [scope.arn(k, "*") for k in CREATED_BY_LAUNCH],
              {"StringEquals": {"ec2:CreateAction": "RunInstances", **own_tag}, **tool_keys}),
        allow("OwnInstancesOnly", ["ec2:TerminateInstances", "ec2:GetConsoleOutput"], [scope.arn("instance", "*")],
              owned),
        allow("PassOnlyItselfToEc2", ["iam:PassRole"], role_arn(scope.account, role_name(scope.cluster, scope.region)),
              passed_to_ec2()),
    ]
    if scope.image_key:
        # The key alone is no proof: any user of the account may tag an image of theirs with it.
        made = {f"ec2:ResourceTag/{TAG_OWNER}": scope.owner} if scope.owner is not None else {}
        statements.append(allow("LaunchFromOwnImages", ["ec2:RunInstances"], [scope.arn("image", "*")],
                                {"StringEquals": {f"ec2:ResourceTag/{TAG_IMAGE_KEY}": scope.image_key, **made}}))
    if scope.storage is not None:
        statements += _storage_statements(*scope.storage)
    # Every node's call to these comes through the VPC's endpoint (endpoints.py): one that does not was made
    # with credentials copied off a node.
    statements += [deny(f"{service.upper()}OnlyThroughTheVpcEndpoint", [f"{service}:*"], "*",
                        {"Null": {"aws:SourceVpc": "true"}}) for service in scope.through_endpoints]
    return document(statements)


def _storage_statements(bucket: str, prefix: str) -> list[Document]:
    below = f"{prefix.rstrip('/')}/*" if prefix else "*"
    return [
        allow("OwnStorageObjects", ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
              f"arn:aws:s3:::{bucket}/{below}"),
        allow("OwnStorageListing", ["s3:ListBucket"], f"arn:aws:s3:::{bucket}",
              {"StringLike": {"s3:prefix": [below, prefix.rstrip("/")]}}),
    ]


@dataclass(frozen=True)
class RoleResult:
    name: str
    created: bool


def ensure_master_role(iam: Any, scope: RoleScope) -> RoleResult:
    """The role, its policy and an instance profile of the same name; idempotent. The policy is
    written every time: the scope (images, subnets) can change from one `up` to the next. The role
    carries the permissions boundary; one made before there was a boundary gets it first (the
    user's policy allows PutRolePolicy only on roles that carry it)."""
    name = role_name(scope.cluster, scope.region)
    tags = [{"Key": TAG_CLUSTER, "Value": scope.cluster}] + (
        [{"Key": TAG_OWNER, "Value": scope.owner}] if scope.owner is not None else [])
    base = [{"Key": TAG_BASE_IMAGE, "Value": scope.base_image}] if scope.base_image else []
    boundary = boundary_arn(scope.account)
    created = _create_if_missing(lambda: iam.create_role(
        RoleName=name, AssumeRolePolicyDocument=json.dumps(TRUST), Tags=tags + base, PermissionsBoundary=boundary,
        Description=f"xeoncluster {scope.cluster}: every node's, for the run agent (recovery, idle removal)"))
    if not created:
        role = iam.get_role(RoleName=name)["Role"]
        _ensure_boundary(iam, role, boundary)
        _ensure_base_image(iam, role, scope.base_image)
    iam.put_role_policy(RoleName=name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(master_policy(scope)))
    _create_if_missing(lambda: iam.create_instance_profile(InstanceProfileName=name, Tags=tags))
    profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    if not any(role["RoleName"] == name for role in profile.get("Roles", [])):
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return RoleResult(name, created)


def _ensure_boundary(iam: Any, role: dict[str, Any], boundary: str) -> None:
    current = role.get("PermissionsBoundary", {}).get("PermissionsBoundaryArn")
    if current != boundary:
        iam.put_role_permissions_boundary(RoleName=role["RoleName"], PermissionsBoundary=boundary)


def _ensure_base_image(iam: Any, role: dict[str, Any], base: str | None) -> None:
    """The boundary lets the role launch the image its tag names: `image:` may name another AMI next time."""
    current = next((t["Value"] for t in role.get("Tags", []) if t["Key"] == TAG_BASE_IMAGE), None)
    if base and current != base:
        iam.tag_role(RoleName=role["RoleName"], Tags=[{"Key": TAG_BASE_IMAGE, "Value": base}])


def _create_if_missing(create: Callable[[], Any]) -> bool:
    try:
        create()
    except ClientError as exc:
        if error_code(exc) == "EntityAlreadyExists":
            return False
        raise
    return True


def delete_master_role(iam: Any, cluster: str, region: str, owner: str = "") -> list[str]:
    """Remove the profile and the role; idempotent. Returns the names removed. A role whose owner tag
    names someone else than `owner` ("": anyone) is another user's cluster of the same name: left."""
    name = role_name(cluster, region)
    removed: list[str] = []
    if owner and _role_owner(iam, name) not in (None, owner):
        return removed
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


def _role_owner(iam: Any, name: str) -> str | None:
    """The role's owner tag; None when the role is gone or carries none."""
    try:
        tags = iam.get_role(RoleName=name)["Role"].get("Tags", [])
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            return None
        raise
    return next((t["Value"] for t in tags if t["Key"] == TAG_OWNER), None)


def profile_exists(iam: Any, name: str) -> bool:
    try:
        iam.get_instance_profile(InstanceProfileName=name)
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            return False
        raise
    return True
