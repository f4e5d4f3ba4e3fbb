"""Bucket policies with a TLS-only statement, as S3 evaluates them and moto 5.2.1 does not.

moto evaluates a bucket policy's conditions with StringEquals only: any other operator counts as met,
and a statement whose condition is not met is a Deny whatever its effect. xeoncluster's buckets deny
requests made without TLS (`Bool: {aws:SecureTransport: "false"}`), so under moto that statement
denied every object request (403 on PutObject, GetObject, DeleteObjects). Requests reach S3 over
HTTPS (in-process moto, and the stand-in's plain-HTTP endpoint, stand for it), so such a statement
never applies: moto evaluates the policy without it. Every other statement is evaluated as before.

Used by tests/aws (through monkeypatch) and by the stand-in (for good).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def applies_over_tls(statement: dict[str, Any]) -> bool:
    """False for a statement conditioned on the request being made without TLS."""
    condition = statement.get("Condition") or {}
    insecure = {k.lower(): str(v).lower() for k, v in (condition.get("Bool") or {}).items()}
    return insecure.get("aws:securetransport") not in ("false", "['false']")


def _get_permission(bucket: Any, action: str, resource: str) -> Any:
    from moto.iam.access_control import IAMPolicy, PermissionResult

    if bucket.policy is None:
        return PermissionResult.NEUTRAL
    policy = json.loads(bucket.policy.decode())
    statements = policy.get("Statement", [])
    kept = [s for s in (statements if isinstance(statements, list) else [statements]) if applies_over_tls(s)]
    if not kept:
        return PermissionResult.NEUTRAL
    return IAMPolicy(json.dumps({**policy, "Statement": kept})).is_action_permitted(action, resource)


def patch(set_attr: Callable[[Any, str, Any], None] = setattr) -> None:
    """Patch moto's bucket-policy evaluation (pass monkeypatch.setattr to undo it after a test)."""
    from moto.s3.models import FakeBucket

    set_attr(FakeBucket, "get_permission", _get_permission)
