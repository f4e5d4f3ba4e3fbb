"""`aws-standin.sh user NAME POLICY_JSON [BOUNDARY_JSON]`: an IAM user holding exactly one policy,
made by the admin (`testing` key), so the CLI can run as that user with its policy enforced.

The boundary file, if given, becomes the account's customer-managed policy of that name (the one
the user's policy requires on every role it creates), or its new default version if it exists.
The user's policy is a customer-managed policy attached to it (inline user policies are limited to
2,048 characters in AWS); whatever else the user held is removed, and so are its old access keys.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from xeoncluster.standin.ec2_errors import ACCOUNT

BOUNDARY_NAME = "xeoncluster-boundary"  # the name the CLI's policy requires (xeoncluster/providers/aws/boundary.py)


@dataclass(frozen=True)
class UserKeys:
    user: str
    access_key_id: str
    secret_access_key: str

    def env_lines(self) -> str:
        """For `env $(aws-standin.sh user ...) xeoncluster ...` or a shell's eval."""
        return f"AWS_ACCESS_KEY_ID={self.access_key_id}\nAWS_SECRET_ACCESS_KEY={self.secret_access_key}\n"


def make_user(iam: Any, name: str, policy: dict[str, Any], boundary: dict[str, Any] | None = None,
              boundary_name: str = BOUNDARY_NAME) -> UserKeys:
    """Idempotent: running it again leaves the user with this policy and one fresh key."""
    if boundary is not None:
        put_managed_policy(iam, boundary_name, boundary)
    _ensure(lambda: iam.create_user(UserName=name))
    _strip(iam, name)
    arn = put_managed_policy(iam, f"standin-user-{name}", policy)
    iam.attach_user_policy(UserName=name, PolicyArn=arn)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return UserKeys(name, key["AccessKeyId"], key["SecretAccessKey"])


def put_managed_policy(iam: Any, name: str, document: dict[str, Any]) -> str:
    """Create the policy, or make `document` its default version (dropping the old ones)."""
    arn = f"arn:aws:iam::{ACCOUNT}:policy/{name}"
    text = json.dumps(document)
    if _ensure(lambda: iam.create_policy(PolicyName=name, PolicyDocument=text)):
        return arn
    for version in iam.list_policy_versions(PolicyArn=arn)["Versions"]:
        if not version["IsDefaultVersion"]:
            iam.delete_policy_version(PolicyArn=arn, VersionId=version["VersionId"])
    iam.create_policy_version(PolicyArn=arn, PolicyDocument=text, SetAsDefault=True)
    return arn


def _strip(iam: Any, name: str) -> None:
    for policy in iam.list_user_policies(UserName=name)["PolicyNames"]:
        iam.delete_user_policy(UserName=name, PolicyName=policy)
    for attached in iam.list_attached_user_policies(UserName=name)["AttachedPolicies"]:
        iam.detach_user_policy(UserName=name, PolicyArn=attached["PolicyArn"])
    for key in iam.list_access_keys(UserName=name)["AccessKeyMetadata"]:
        iam.delete_access_key(UserName=name, AccessKeyId=key["AccessKeyId"])


def _ensure(create: Any) -> bool:
    """True if made now, False if it was there already."""
    try:
        create()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "EntityAlreadyExists":
            return False
        raise
    return True


def read_document(path: str) -> dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read a policy document from {path}: {exc}") from None
    if not isinstance(document, dict) or "Statement" not in document:
        raise SystemExit(f"{path} is not an IAM policy document (no Statement)")
    return document


def admin_iam(endpoint: str) -> Any:
    """An IAM client of the stand-in's admin (the `testing` key, which the gate lets through)."""
    import boto3

    return boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")
