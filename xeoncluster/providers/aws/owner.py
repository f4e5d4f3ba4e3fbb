"""Who owns a cluster on AWS: the `xeoncluster:owner` tag on everything the tool makes.

Its value is the creating identity's `UserId` from sts GetCallerIdentity, which is exactly the
`aws:userid` of the caller's requests: an IAM user's unique id (AIDA...), a role session's
`ROLEID:SESSION` (AROA...:name). The user's policy (policy.py) compares the tag with
`${aws:userid}`, so a user acts only on the clusters they made; the same role under another session
name is another owner. An administrator's policy has no such condition and may still remove anything.

The run agent on the master launches replacements for the user who made the cluster, never as its own
role session: it acts for the owner recorded in the cluster's state (ClusterRecord.owner).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.aws.clients import cluster_filter, error_code, paginate, tags_of, translated
from xeoncluster.providers.aws.instances import LIVE_STATES
from xeoncluster.providers.base import TAG_OWNER
from xeoncluster.providers.node_kinds import NodeState

# What AWS answers a call the caller's policy does not allow.
REFUSED_CODES = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})


@dataclass
class CallerIdentity:
    """The credentials' account and owner id, read once; or the owner the run agent acts for."""

    read: Callable[[], Mapping[str, Any]]  # sts GetCallerIdentity
    acting_for: str | None = None
    _answer: dict[str, Any] = field(default_factory=dict)

    def _identity(self) -> dict[str, Any]:
        if not self._answer:
            with translated("reading the AWS identity"):
                self._answer.update(self.read())
        return self._answer

    def account(self) -> str:
        return str(self._identity()["Account"])

    def owner(self) -> str:
        return self.acting_for if self.acting_for is not None else str(self._identity()["UserId"])


def owners(ec2: Any, cluster: str) -> set[str]:
    """The owner tags on the cluster's instances (not yet terminated), security groups and key pairs."""
    found = paginate(ec2, "describe_instances", "Reservations", Filters=[
        *cluster_filter(cluster),
        {"Name": "instance-state-name", "Values": [*LIVE_STATES, NodeState.SHUTTING_DOWN.value]}])
    resources = [i for r in found for i in r.get("Instances", [])]
    resources += ec2.describe_security_groups(Filters=cluster_filter(cluster))["SecurityGroups"]
    resources += ec2.describe_key_pairs(Filters=cluster_filter(cluster))["KeyPairs"]
    return {tags_of(r)[TAG_OWNER] for r in resources if TAG_OWNER in tags_of(r)}


def not_yours(ec2: Any, cluster: str, me: str, refused: ProviderError) -> ProviderError:
    """`down` of a cluster another identity made: IAM refuses it, and this says whose it is, in one
    line. Any other failure (or a refusal on the caller's own cluster) is `refused` as it was."""
    cause = refused.__cause__
    if not (isinstance(cause, ClientError) and error_code(cause) in REFUSED_CODES):
        return refused
    others: set[str] = set()
    with contextlib.suppress(ClientError, BotoCoreError):
        others = owners(ec2, cluster) - {me}
    return _belongs_to(cluster, others, me, "your IAM policy refuses removing it") if others else refused


def refuse_if_others(ec2: Any, cluster: str, me: str) -> None:
    """`down` found nothing of the caller's under this name: when another identity's resources carry
    it, say whose they are (exit 1) rather than "nothing to remove"."""
    others = owners(ec2, cluster) - {me} if me else set()
    if others:
        raise _belongs_to(cluster, others, me, "nothing of yours was removed")


def _belongs_to(cluster: str, others: set[str], me: str, outcome: str) -> ProviderError:
    return ProviderError(
        f"cluster {cluster} belongs to another identity: its resources carry {TAG_OWNER}="
        f"{', '.join(sorted(others))} and you are {me}; {outcome}",
        hint=f"its owner runs `xeoncluster down --name {cluster}`, or an administrator: "
             f"`xeoncluster down --name {cluster} --provider aws --owner {sorted(others)[0]}`")
