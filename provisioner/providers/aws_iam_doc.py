"""Building blocks of the IAM documents the tool writes or prints: statements, ARNs, conditions.

The user's policy (aws_policy.py), the permissions boundary (aws_boundary.py) and the master's role
(aws_role.py) are built from these, so the three say the same thing the same way.
"""
from __future__ import annotations

from typing import Any

from .base import TAG_CLUSTER

Document = dict[str, Any]
# Canonical's account: the owner of the public Ubuntu AMIs that nodes start from.
CANONICAL = "099720109477"
# Where EC2 creates a resource by its own name (for CreateTags with ec2:CreateAction).
CREATING_ACTIONS = ("RunInstances", "CreateSecurityGroup", "ImportKeyPair", "CreatePlacementGroup", "CreateImage")


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


def request_tagged() -> dict[str, Any]:
    """The request tags the resource it creates with the cluster tag (any cluster)."""
    return {"Null": {f"aws:RequestTag/{TAG_CLUSTER}": "false"}}


def resource_tagged() -> dict[str, Any]:
    """The resource acted on carries the cluster tag (any cluster)."""
    return {"Null": {f"ec2:ResourceTag/{TAG_CLUSTER}": "false"}}
