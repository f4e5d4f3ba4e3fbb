"""A run bucket's owner and lock-down.

The auto bucket's name, `xeoncluster-ACCOUNT-REGION`, is predictable: another account can create it
first and let us write into it. Every request therefore carries ExpectedBucketOwner (S3 answers 403
when the bucket belongs to anyone else), and a bucket that is not ours is refused, never used. Our
own auto bucket is private, encrypted, has ACLs disabled (BucketOwnerEnforced) and denies any request
made without TLS; what it lacks of that is put back and named.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.aws.clients import error_code

MISSING = ("404", "NoSuchBucket", "NotFound")
DENIED = ("403", "AccessDenied", "AllAccessDisabled", "Forbidden")
TLS_ONLY_SID = "XeonclusterDenyInsecureTransport"
PUBLIC_ACCESS_BLOCK = {"BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True,
                       "RestrictPublicBuckets": True}
ENCRYPTION = {"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
OWNERSHIP = {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}


def owned(s3: Any, bucket: str, owner: str, auto: bool) -> bool:
    """True: the bucket exists and `owner` owns it. False: there is no such bucket. A bucket of another
    account is refused: S3 answers 403 to a request whose ExpectedBucketOwner is not the bucket's."""
    try:
        # GetBucketLocation, not HeadBucket: HeadBucket is authorized as listing the whole bucket, which
        # a user's policy allows only below their own prefix.
        s3.get_bucket_location(Bucket=bucket, ExpectedBucketOwner=owner)
        return True
    except ClientError as exc:
        code = error_code(exc)
        if code in MISSING:
            return False
        if code in DENIED:
            raise not_ours(bucket, owner, auto) from None
        raise


def not_ours(bucket: str, owner: str, auto: bool) -> ConfigError:
    if auto:
        return ConfigError(f"storage: bucket {bucket} exists but belongs to another account, not yours ({owner}); "
                           "nothing was created",
                           hint="someone made that name first: name a bucket of your own with storage.url "
                                "(or train --storage): s3://BUCKET/PREFIX; if it is yours, your IAM policy lacks "
                                "s3:ListBucket on it")
    return ConfigError(f"storage: bucket {bucket} is not your account's ({owner}), or your policy does not let you "
                       "use it",
                       hint="name a bucket your account owns, or use storage: auto")


def tls_only_statement(bucket: str) -> dict[str, Any]:
    return {"Sid": TLS_ONLY_SID, "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}}}


def lock_down(s3: Any, bucket: str, owner: str, parts: list[str] | None = None) -> None:
    """Put the named parts of the lock-down on the bucket (all of them when `parts` is None)."""
    for name, (_, put) in LOCK_DOWN.items():
        if parts is None or name in parts:
            put(s3, bucket, owner)


def lacking(s3: Any, bucket: str, owner: str) -> list[str]:
    """The parts of the lock-down the bucket lacks, by name."""
    return [name for name, (has, _) in LOCK_DOWN.items() if not has(s3, bucket, owner)]


def has_tls_only_policy(s3: Any, bucket: str, owner: str) -> bool:
    return any(_denies_plain_http(s) for s in _policy(s3, bucket, owner).get("Statement", []))


def _denies_plain_http(statement: dict[str, Any]) -> bool:
    condition = statement.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport")
    return statement.get("Effect") == "Deny" and str(condition).lower() == "false"


def _policy(s3: Any, bucket: str, owner: str) -> dict[str, Any]:
    text = _read(lambda: s3.get_bucket_policy(Bucket=bucket, ExpectedBucketOwner=owner)["Policy"],
                 "NoSuchBucketPolicy")
    return json.loads(text) if text else {}


def _put_tls_only_policy(s3: Any, bucket: str, owner: str) -> None:
    """Added to whatever policy the bucket has: its other statements stay."""
    policy = _policy(s3, bucket, owner) or {"Version": "2012-10-17", "Statement": []}
    policy["Statement"] = [*policy.get("Statement", []), tls_only_statement(bucket)]
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy), ExpectedBucketOwner=owner)


def _has_public_access_block(s3: Any, bucket: str, owner: str) -> bool:
    found = _read(lambda: s3.get_public_access_block(Bucket=bucket, ExpectedBucketOwner=owner)
                  ["PublicAccessBlockConfiguration"], "NoSuchPublicAccessBlockConfiguration")
    return bool(found) and all(found.get(k) for k in PUBLIC_ACCESS_BLOCK)


def _has_encryption(s3: Any, bucket: str, owner: str) -> bool:
    return bool(_read(lambda: s3.get_bucket_encryption(Bucket=bucket, ExpectedBucketOwner=owner)
                      ["ServerSideEncryptionConfiguration"]["Rules"], "ServerSideEncryptionConfigurationNotFoundError"))


def _has_ownership_enforced(s3: Any, bucket: str, owner: str) -> bool:
    rules = _read(lambda: s3.get_bucket_ownership_controls(Bucket=bucket, ExpectedBucketOwner=owner)
                  ["OwnershipControls"]["Rules"], "OwnershipControlsNotFoundError")
    return bool(rules) and all(r.get("ObjectOwnership") == "BucketOwnerEnforced" for r in rules)


def _read(call: Callable[[], Any], absent: str) -> Any:
    """The setting, or None when the bucket has none."""
    try:
        return call()
    except ClientError as exc:
        if error_code(exc) == absent:
            return None
        raise


def _put_ownership_enforced(s3: Any, bucket: str, owner: str) -> None:
    s3.put_bucket_ownership_controls(Bucket=bucket, OwnershipControls=OWNERSHIP, ExpectedBucketOwner=owner)


def _put_public_access_block(s3: Any, bucket: str, owner: str) -> None:
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration=PUBLIC_ACCESS_BLOCK,
                               ExpectedBucketOwner=owner)


def _put_encryption(s3: Any, bucket: str, owner: str) -> None:
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration=ENCRYPTION, ExpectedBucketOwner=owner)


Check = Callable[[Any, str, str], bool]
Put = Callable[[Any, str, str], None]
# In this order on a new bucket: ACLs off before anything is written, the policy last.
LOCK_DOWN: dict[str, tuple[Check, Put]] = {
    "ownership controls (ACLs disabled)": (_has_ownership_enforced, _put_ownership_enforced),
    "public access block": (_has_public_access_block, _put_public_access_block),
    "default encryption": (_has_encryption, _put_encryption),
    "TLS-only bucket policy": (has_tls_only_policy, _put_tls_only_policy),
}
