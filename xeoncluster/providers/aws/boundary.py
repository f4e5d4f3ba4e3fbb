"""The permissions boundary: the most any role the tool creates may ever do, whatever policy it gets.

An administrator creates the customer-managed policy `xeoncluster-boundary` once per account
(`xeoncluster policy --boundary` prints it and the command that creates it). The user's policy lets
its holder create `xeoncluster-*` roles only with this boundary and never change or remove it, so a
role given an admin policy still can do no more than the run agent needs: launch (tagged with a
cluster and an owner, carrying one of its owner's `xeoncluster-*` roles) and terminate tagged
instances, read EC2, and use the account's `xeoncluster-*` buckets.
"""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.aws.clients import error_code
from xeoncluster.providers.aws.iam_doc import (
    CANONICAL,
    ROLE_BASE_IMAGE,
    ROLE_OWNER,
    Document,
    allow,
    deny,
    document,
    ec2_arn,
    ec2_arns,
    owned_by_role,
    passed_to_ec2,
    requested_for_role_owner,
    role_arn,
)
from xeoncluster.providers.base import TAG_OWNER

BOUNDARY_NAME = "xeoncluster-boundary"
BOUNDARY_FILE = f"{BOUNDARY_NAME}.json"
LAUNCHED = ("instance", "volume", "spot-instances-request")
STORAGE_OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")
# Set by AWS on every request signed with an EC2 instance's role credentials, wherever they are used:
# the VPC they were delivered to.
INSTANCE_VPC_KEY = "aws:Ec2InstanceSourceVpc"
# Set with it: the private address of the instance the credentials were delivered to.
INSTANCE_ADDRESS_KEY = "aws:Ec2InstanceSourcePrivateIPv4"


def boundary_arn(account: str) -> str:
    return f"arn:aws:iam::{account}:policy/{BOUNDARY_NAME}"


def create_command(account: str) -> str:
    """What an administrator runs once per account (the file is `xeoncluster policy --boundary`'s output)."""
    return (f"xeoncluster policy --boundary --account {account} > {BOUNDARY_FILE} && "
            f"aws iam create-policy --policy-name {BOUNDARY_NAME} --policy-document file://{BOUNDARY_FILE}")


def boundary_document(account: str) -> Document:
    """Every grant is tied to the role's own owner tag (ABAC): a role a user makes, whatever policy it
    is given, reaches only instances and runs that carry that user's id, never a colleague's."""
    return document([
        # Describe* and the price list have no resource-level permissions.
        allow("Read", ["ec2:Describe*", "pricing:GetProducts"], "*"),
        # Tagged with a cluster and the role's own owner (the role's policy narrows it: role.py).
        allow("LaunchForTheRoleOwner", ["ec2:RunInstances"], ec2_arns(account, LAUNCHED), requested_for_role_owner()),
        allow("TagOnLaunchOnly", ["ec2:CreateTags"], ec2_arns(account, LAUNCHED),
              {"StringEquals": {"ec2:CreateAction": "RunInstances", **requested_for_role_owner()["StringEquals"]}}),
        allow("LaunchInAccountNetwork", ["ec2:RunInstances"], ec2_arns(account, ("network-interface", "subnet"))),
        allow("LaunchWithTheOwnerClusterResources", ["ec2:RunInstances"],
              ec2_arns(account, ("security-group", "key-pair", "placement-group")), owned_by_role()),
        *role_image_statements(account),
        allow("TheOwnerInstancesOnly", ["ec2:TerminateInstances", "ec2:GetConsoleOutput"],
              ec2_arn(account, "instance"), owned_by_role()),
        # The nodes it launches carry the cluster's role (the role's policy: only itself).
        allow("PassTheOwnerRolesToEc2", ["iam:PassRole"], role_arn(account, "xeoncluster-*"),
              passed_to_ec2({f"iam:ResourceTag/{TAG_OWNER}": ROLE_OWNER})),
        *owner_storage_statements(account, ROLE_OWNER, list(STORAGE_OBJECT_ACTIONS)),
        # CreateRole takes any trust policy and IAM has no condition on it: a role could be made
        # assumable from elsewhere. Its credentials are then not an instance's, and this refuses them.
        deny("OnlyWithAnInstanceCredential", ["*"], "*", {"Null": {INSTANCE_VPC_KEY: "true"}}),
        # AWS sets the instance keys wherever the credentials are used, so the two above do not bind them
        # to their instance; through a VPC endpoint (and only there) these do (endpoints.py).
        deny("ThroughAnEndpointOnlyFromItsOwnVpc", ["*"], "*",
             {"StringNotEquals": {"aws:SourceVpc": f"${{{INSTANCE_VPC_KEY}}}"}, "Null": {"aws:SourceVpc": "false"}}),
        deny("ThroughAnEndpointOnlyFromItsOwnAddress", ["*"], "*",
             {"StringNotEquals": {"aws:VpcSourceIp": f"${{{INSTANCE_ADDRESS_KEY}}}"},
              "Null": {"aws:VpcSourceIp": "false"}}),
    ])


def image_statements(account: str) -> list[Document]:
    """The user's nodes start from Canonical's Ubuntu or from an image of this account: their own bakes,
    found by key and owner (images.py), or one that `image:` names (how users share an image)."""
    return [ubuntu_statement(account),
            allow("LaunchFromOwnImages", ["ec2:RunInstances"], ec2_arn(account, "image"),
                  {"StringEquals": {"ec2:Owner": account}})]


def role_image_statements(account: str) -> list[Document]:
    """A role's nodes start from Canonical's Ubuntu, from an image its own owner made, or from the base image
    its tag names (role.py: what `image:` names). Any user may tag an image of theirs with another's image
    key, so an account image that carries a colleague's owner tag is refused, whatever its key."""
    return [ubuntu_statement(account),
            allow("LaunchFromTheOwnerImages", ["ec2:RunInstances"], ec2_arn(account, "image"),
                  {"StringEquals": {"ec2:Owner": account, f"ec2:ResourceTag/{TAG_OWNER}": ROLE_OWNER}}),
            allow("LaunchFromTheBaseImage", ["ec2:RunInstances"], ec2_arn(account, "image", ROLE_BASE_IMAGE),
                  {"StringEquals": {"ec2:Owner": account}})]


def ubuntu_statement(account: str) -> Document:
    return allow("LaunchFromUbuntu", ["ec2:RunInstances"], ec2_arn(account, "image"),
                 {"StringEquals": {"ec2:Owner": CANONICAL}})


def owner_storage_statements(account: str, owner: str, object_actions: list[str]) -> list[Document]:
    """Runs below `owner`'s prefix (`OWNER/CLUSTER/runs/...`) in the account's own `xeoncluster-*`
    buckets: a bucket of that name in another account is refused, and so is a colleague's prefix."""
    own = {"StringEquals": {"s3:ResourceAccount": account}}
    listing = {**own, "StringLike": {"s3:prefix": [f"{owner}/*", owner]}}
    return [allow("OwnRunObjects", object_actions, f"arn:aws:s3:::xeoncluster-*/{owner}/*", own),
            allow("OwnRunListing", ["s3:ListBucket"], "arn:aws:s3:::xeoncluster-*", listing)]


def check_boundary(iam: Any, account: str, required: bool = True) -> list[str]:
    """`up` refuses without the boundary (a role created without it would be refused anyway);
    `plan` (required=False) notes it. A boundary that differs from this version's is a warning."""
    arn = boundary_arn(account)
    try:
        version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
        stored = iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]["Document"]
    except ClientError as exc:
        if error_code(exc) in ("AccessDenied", "AccessDeniedException"):
            raise ConfigError(f"may not read the permissions boundary {arn} (iam:GetPolicy)",
                              hint="your IAM policy is older than this version: `xeoncluster policy` prints "
                                   "the current one") from None
        if error_code(exc) != "NoSuchEntity":
            raise
        error = ConfigError(f"the permissions boundary policy {BOUNDARY_NAME} does not exist in account {account}",
                            hint=f"an administrator creates it once: {create_command(account)}")
        if required:
            raise error from None
        return [f"warning: {error.message}; `up` would stop here"]
    if _parsed(stored) != boundary_document(account):
        return [f"warning: the permissions boundary {BOUNDARY_NAME} differs from what this version prints "
                "(`xeoncluster policy --boundary`): the master's run agent may be refused"]
    return []


def _parsed(stored: Any) -> Any:
    """boto3 decodes policy documents; some endpoints hand back the URL-encoded JSON text."""
    if isinstance(stored, str):
        return json.loads(unquote(stored))
    return stored
