"""`xeoncluster policy`: the IAM documents an AWS account needs, ready to paste: the policy of the
identity that runs xeoncluster, or the permissions boundary an administrator creates once."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..context import CommandContext
from ..errors import ConfigError
from ..providers.aws_boundary import BOUNDARY_NAME, boundary_document, create_command
from ..providers.aws_policy import policy_document

USER_POLICY_NAME = "xeoncluster"


@runtime_checkable
class _KnowsAccount(Protocol):
    def account_id(self) -> str: ...


@dataclass(frozen=True)
class PrintedPolicy:
    account: str
    document: dict[str, Any]
    how: str  # one line: what to do with the document


def policy(ctx: CommandContext | None, account: str | None, boundary: bool) -> PrintedPolicy:
    """For `account`, else the caller's (sts:GetCallerIdentity through the context's provider)."""
    account = _checked(account) if account is not None else _caller_account(ctx)
    if boundary:
        return PrintedPolicy(account, boundary_document(account),
                             f"the permissions boundary {BOUNDARY_NAME} of account {account}; an administrator "
                             f"creates it once: {create_command(account)}")
    return PrintedPolicy(account, policy_document(account),
                         f"the policy of the identity that runs xeoncluster in account {account}: "
                         f"aws iam create-policy --policy-name {USER_POLICY_NAME} --policy-document file://FILE, "
                         "then attach it to that user, group or role; the roles xeoncluster creates carry the "
                         "boundary `xeoncluster policy --boundary` prints")


def _checked(account: str) -> str:
    if not re.fullmatch(r"[0-9]{12}", account):
        raise ConfigError(f"--account {account!r} is not an AWS account id",
                          hint="an account id is 12 digits; leave --account out to use your credentials' account")
    return account


def _caller_account(ctx: CommandContext | None) -> str:
    if ctx is None or not isinstance(ctx.provider, _KnowsAccount):
        raise ConfigError("the IAM policies are for AWS", hint="pass --provider aws, or --account ID")
    return _checked(ctx.provider.account_id())
