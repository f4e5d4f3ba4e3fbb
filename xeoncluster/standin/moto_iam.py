"""What the stand-in's IAM needs from moto: an instance's role, session credentials for it (served by
IMDS), and who an access key belongs to (a role's session, or an IAM user) with its policies and
permissions boundary.

All lookups read moto's in-process backends (the daemon runs moto in the same process)."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from xeoncluster.standin.ec2_errors import ACCOUNT

PARTITION = "aws"
SESSION_SECONDS = 3600
# IMDS hands out fresh credentials this long before the old ones expire, as EC2 does (about 5 minutes).
RENEW_BEFORE = timedelta(minutes=5)


@dataclass(frozen=True)
class Caller:
    arn: str                          # arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION, or a user's ARN
    policies: tuple[dict[str, Any], ...]
    principal: str = ""               # the role's or user's own ARN (aws:PrincipalArn)
    boundary: tuple[dict[str, Any], ...] | None = None  # None: no permissions boundary
    # aws:userid, what sts GetCallerIdentity answers as UserId: a user's unique id, a session's
    # ROLEID:SESSION (moto's ids, so the gate and moto's sts agree)
    user_id: str = ""
    # The role's tags (aws:PrincipalTag/KEY), and for a session an instance got from IMDS, the VPC its
    # credentials went to (aws:Ec2InstanceSourceVpc): AWS sets that key on no other request.
    tags: tuple[tuple[str, str], ...] = ()
    instance_vpc: str = ""

    def context(self) -> dict[str, list[str]]:
        """The condition keys this caller brings to every request."""
        found = {f"aws:PrincipalTag/{key}": [value] for key, value in self.tags}
        return {**found, **({"aws:Ec2InstanceSourceVpc": [self.instance_vpc]} if self.instance_vpc else {})}

    @property
    def name(self) -> str:
        """The role's or the user's name, as `status` counts their calls."""
        return (self.principal or self.arn).rsplit("/", 1)[-1]


@dataclass(frozen=True)
class SessionCredentials:
    role: str
    access_key_id: str
    secret_access_key: str
    token: str
    expiration: datetime
    issued: datetime

    def imds_document(self) -> dict[str, str]:
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        return {"Code": "Success", "LastUpdated": self.issued.strftime(stamp), "Type": "AWS-HMAC",
                "AccessKeyId": self.access_key_id, "SecretAccessKey": self.secret_access_key,
                "Token": self.token, "Expiration": self.expiration.strftime(stamp)}


@dataclass
class RoleSessions:
    """Session credentials per instance, renewed shortly before they expire."""

    issued: dict[str, SessionCredentials] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def for_instance(self, instance_id: str, region: str) -> SessionCredentials | None:
        role_arn = instance_role(instance_id, region)
        if role_arn is None:
            return None
        with self.lock:
            current = self.issued.get(instance_id)
            if current is None or current.expiration - RENEW_BEFORE < datetime.now(UTC):
                current = self.issued[instance_id] = _assume(role_arn, instance_id, region)
            return current


def instance_role(instance_id: str, region: str) -> str | None:
    """The role of the instance profile the instance was launched with, if any."""
    from moto.ec2.models import ec2_backends

    association = ec2_backends[ACCOUNT][region].iam_instance_profile_associations.get(instance_id)
    roles = association.iam_instance_profile.roles if association is not None else []
    return str(roles[0].arn) if roles else None


def _assume(role_arn: str, session: str, region: str) -> SessionCredentials:
    from moto.sts.models import sts_backends

    assumed = sts_backends[ACCOUNT][PARTITION].assume_role(
        region_name=region, role_session_name=session, role_arn=role_arn,
        policy=None,  # type: ignore[arg-type]  # moto's own AssumeRole passes None when the request has none
        duration=SESSION_SECONDS,
        external_id=None)  # type: ignore[arg-type]  # as moto's AssumeRole does without an ExternalId
    expiration = assumed.expiration.replace(tzinfo=UTC)
    return SessionCredentials(role_arn.rsplit("/", 1)[1], assumed.access_key_id, assumed.secret_access_key,
                              assumed.session_token, expiration, expiration - timedelta(seconds=SESSION_SECONDS))


def caller(access_key_id: str) -> Caller | None:
    """The role session or IAM user an access key belongs to, with its policies and boundary; None for
    other keys (the admin's `testing` credentials, which the stand-in lets do anything, as moto does)."""
    from moto.iam.models import iam_backends

    iam = iam_backends[ACCOUNT][PARTITION]
    return _session_caller(iam, access_key_id) or _user_caller(iam, access_key_id)


def _session_caller(iam: Any, access_key_id: str) -> Caller | None:
    from moto.sts.models import sts_backends

    if PARTITION not in sts_backends[ACCOUNT]:
        return None
    assumed = sts_backends[ACCOUNT][PARTITION].get_assumed_role_from_access_key(access_key_id)
    if assumed is None:
        return None
    try:
        role = iam.get_role_by_arn(assumed.role_arn)
    except Exception:  # noqa: BLE001 - moto raises its own not-found types; a deleted role allows nothing
        return Caller(assumed.arn, (), assumed.role_arn, user_id=assumed.user_id)
    tags = tuple((t["Key"], t["Value"]) for t in role.tags)
    return Caller(assumed.arn, _policies(role), str(role.arn), _boundary(iam, role.permissions_boundary_arn),
                  assumed.user_id, tags, _instance_vpc(assumed.session_name, str(role.arn), assumed.region_name))


def _instance_vpc(session: str, role_arn: str, region: str) -> str:
    """A session is an instance's when it is named for an instance launched with that role (as IMDS
    names the sessions it hands out): the VPC of that instance; "" for any other session."""
    from moto.ec2.models import ec2_backends

    if not session.startswith("i-") or instance_role(session, region) != role_arn:
        return ""
    try:
        instance = ec2_backends[ACCOUNT][region].get_instance(session)
    except Exception:  # noqa: BLE001 - moto raises its own not-found type; a gone instance has no VPC
        return ""
    return str(getattr(instance, "vpc_id", "") or "")


def _user_caller(iam: Any, access_key_id: str) -> Caller | None:
    user = iam.get_user_from_access_key_id(access_key_id)
    if user is None:
        return None
    groups = [g for g in iam.groups.values() if user in g.users]
    policies = _policies(user) + tuple(doc for group in groups for doc in _policies(group))
    # moto keeps no permissions boundary for users (PutUserPermissionsBoundary is not implemented).
    boundary = _boundary(iam, getattr(user, "permissions_boundary_arn", None))
    return Caller(str(user.arn), policies, str(user.arn), boundary, str(user.id))


def _boundary(iam: Any, arn: str | None) -> tuple[dict[str, Any], ...] | None:
    """A boundary that names a policy no longer there allows nothing, rather than everything."""
    if not arn:
        return None
    policy = iam.managed_policies.get(arn)
    document = _document(policy) if policy is not None else {}
    return (document,) if document else ()


def _policies(entity: Any) -> tuple[dict[str, Any], ...]:
    inline = [json.loads(doc) if isinstance(doc, str) else doc for doc in entity.policies.values()]
    managed = [_document(policy) for policy in entity.managed_policies.values()]
    return tuple(inline + [doc for doc in managed if doc])


def _document(policy: Any) -> dict[str, Any]:
    version = next((v for v in policy.versions if v.is_default), None)
    text = version.document if version is not None else "{}"
    return json.loads(text) if isinstance(text, str) else dict(text)

