"""Building blocks of the IAM documents the tool writes or prints: statements, ARNs, conditions.

The user's policy (policy.py), the permissions boundary (boundary.py) and the master's role
(role.py) are built from these, so the three say the same thing the same way.
"""
from __future__ import annotations

from typing import Any

from xeoncluster.providers.base import TAG_CLUSTER, TAG_OWNER

Document = dict[str, Any]
# Canonical's account: the owner of the public Ubuntu AMIs that nodes start from.
CANONICAL = "099720109477"
# The caller's unique id (an IAM user's AIDA..., a role session's AROA...:SESSION), which the owner tag
# of everything the tool makes holds (owner.py): a user acts only on what they made.
CALLER = "${aws:userid}"
# What a role's own owner tag says (the tool tags every role it makes with its maker's UserId): the
# boundary lets a role touch only what carries that same owner.
ROLE_OWNER = f"${{aws:PrincipalTag/{TAG_OWNER}}}"
# A role's tag naming the image its nodes start from before any bake (`image:`'s AMI, or Ubuntu's): the
# boundary lets a role launch that image, its owner's own images and Canonical's, and no colleague's.
TAG_BASE_IMAGE = "xeoncluster:base-image"
ROLE_BASE_IMAGE = f"${{aws:PrincipalTag/{TAG_BASE_IMAGE}}}"
# The only service a role of the tool is ever passed to: EC2, in an instance profile.
EC2_SERVICE = "ec2.amazonaws.com"


def allow(sid: str, actions: list[str], resources: str | list[str],
          condition: dict[str, Any] | None = None) -> Document:
    return _statement(sid, "Allow", actions, resources, condition)


def deny(sid: str, actions: list[str], resources: str | list[str],
         condition: dict[str, Any] | None = None) -> Document:
    return _statement(sid, "Deny", actions, resources, condition)


def _statement(sid: str, effect: str, actions: list[str], resources: str | list[str],
               condition: dict[str, Any] | None) -> Document:
    statement: Document = {"Sid": sid, "Effect": effect, "Action": actions, "Resource": resources}
    if condition:
        statement["Condition"] = condition
    return statement


def document(statements: list[Document]) -> Document:
    return {"Version": "2012-10-17", "Statement": statements}


def ec2_arn(account: str, kind: str, name: str = "*", region: str = "*") -> str:
    """Images and snapshots have no account in their ARN (public ones belong to nobody here)."""
    owner = "" if kind in ("image", "snapshot") else account
    return f"arn:aws:ec2:{region}:{owner}:{kind}/{name}"


def ec2_arns(account: str, kinds: tuple[str, ...], region: str = "*") -> list[str]:
    return [ec2_arn(account, kind, region=region) for kind in kinds]


def role_arn(account: str, name: str) -> str:
    return f"arn:aws:iam::{account}:role/{name}"


def passed_to_ec2(also: dict[str, Any] | None = None) -> dict[str, Any]:
    """PassRole only into an instance profile (`iam:PassedToService`); `also`: more keys the request must equal."""
    return {"StringEquals": {"iam:PassedToService": EC2_SERVICE, **(also or {})}}


def request_tagged(owner: bool = False) -> dict[str, Any]:
    """The request tags the resource it creates with the cluster tag (any cluster); `owner`: and with
    an owner tag (any owner)."""
    keys = (TAG_CLUSTER, TAG_OWNER) if owner else (TAG_CLUSTER,)
    return {"Null": {f"aws:RequestTag/{key}": "false" for key in keys}}


def resource_tagged() -> dict[str, Any]:
    """The resource acted on carries the cluster tag (any cluster)."""
    return {"Null": {f"ec2:ResourceTag/{TAG_CLUSTER}": "false"}}


def owned_by_role() -> dict[str, Any]:
    """The resource acted on carries a cluster tag and the role's own owner (a role without an owner
    tag matches nothing: the variable is then undefined)."""
    return {"StringEquals": {f"ec2:ResourceTag/{TAG_OWNER}": ROLE_OWNER}, **resource_tagged()}


def requested_for_role_owner() -> dict[str, Any]:
    """What the request creates is tagged with a cluster and with the role's own owner."""
    return {"StringEquals": {f"aws:RequestTag/{TAG_OWNER}": ROLE_OWNER}, **request_tagged(owner=True)}


def requested_by_caller(also: dict[str, Any] | None = None, cluster: bool = True) -> dict[str, Any]:
    """The request tags what it creates with the caller as its owner and (`cluster`) with the cluster
    tag; `also`: more keys the request must equal."""
    condition: dict[str, Any] = {"StringEquals": {**(also or {}), f"aws:RequestTag/{TAG_OWNER}": CALLER}}
    return {**condition, **request_tagged()} if cluster else condition


def made_by_caller(service: str = "ec2", also: dict[str, Any] | None = None) -> dict[str, Any]:
    """The resource acted on was made by the caller: its owner tag is the caller's id. The user's policy
    sets that tag only on creation and only with the cluster tag, so such a resource is the tool's.
    `also`: more keys the request must equal."""
    return {"StringEquals": {**(also or {}), f"{service}:ResourceTag/{TAG_OWNER}": CALLER}}
