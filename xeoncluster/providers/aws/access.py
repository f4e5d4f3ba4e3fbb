"""The IAM documents an AWS account needs to run xeoncluster, ready to paste: the policy of the identity
that runs it, or the permissions boundary an administrator creates once (`xeoncluster policy`)."""
from __future__ import annotations

import re
from typing import Any

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.aws.boundary import BOUNDARY_NAME, boundary_document, create_command
from xeoncluster.providers.aws.policy import policy_document
from xeoncluster.providers.aws.storage import setup_command

USER_POLICY_NAME = "xeoncluster"


def checked_account(account: str) -> str:
    if not re.fullmatch(r"[0-9]{12}", account):
        raise ConfigError(f"--account {account!r} is not an AWS account id",
                          hint="an account id is 12 digits; leave --account out to use your credentials' account")
    return account


def access_documents(account: str, boundary: bool) -> tuple[dict[str, Any], str]:
    """The document, and one line on what to do with it."""
    account = checked_account(account)
    if boundary:
        return boundary_document(account), (
            f"the permissions boundary {BOUNDARY_NAME} of account {account}; an administrator "
            f"creates it once: {create_command(account)}; and once per region, the run bucket each user "
            f"keeps their runs in (below their own id), made and locked down: {setup_command('REGION')}")
    return policy_document(account), (
        f"the policy of the identity that runs xeoncluster in account {account}: "
        f"aws iam create-policy --policy-name {USER_POLICY_NAME} --policy-document file://FILE, "
        "then attach it to that user, group or role; the roles xeoncluster creates carry the "
        "boundary `xeoncluster policy --boundary` prints")
