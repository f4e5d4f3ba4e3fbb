"""S3 as run storage: the account's default bucket (made once, locked down), a bucket the user names
(used as it is, after checking it is the account's and in the cluster's region), and the objects in it.
Whose a bucket is, and the lock-down, are bucket.py's."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.aws import bucket as aws_bucket
from xeoncluster.providers.aws.clients import error_code
from xeoncluster.storage.base import StaleVersion, StorageLocation, StoredObject, Versioned

TAG_STORAGE = "xeoncluster:storage"
# Multipart uploads that never finish (an agent that died mid-upload) are billed until aborted.
ABORT_INCOMPLETE_AFTER_DAYS = 7
# A conditional write that lost: 412 (another write came first), 409 (another one is under way: a race
# lost all the same), and NoSuchKey (IfMatch on an object since removed).
LOST_RACE = ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey")
TRANSFER = TransferConfig(multipart_threshold=64 * 2**20, multipart_chunksize=64 * 2**20, max_concurrency=4)


def auto_bucket(account: str, region: str) -> str:
    return f"xeoncluster-{account}-{region}"


def parse_s3_url(url: str) -> StorageLocation:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not url.startswith("s3://") or not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
        raise ConfigError(f"storage: {url!r} is not an S3 location such as s3://my-bucket/runs",
                          hint="bucket names are 3-63 lowercase letters, digits, '-' and '.'; or use storage: auto")
    return StorageLocation(url=url.rstrip("/"), container=bucket, prefix=prefix.strip("/"))


@dataclass(frozen=True)
class Access:
    """What resolving a location may do: `create` a missing auto bucket (where the caller may: an
    administrator), `setup` put back what it lacks of its lock-down (`storage init`); `user`: the
    caller's id, below which their runs live ("": none, a run agent of a cluster made before owners)."""

    create: bool
    setup: bool = False
    user: str = ""


def resolve(s3: Any, url: str, account: str, region: str, access: Access,
            report: Callable[[str], None]) -> StorageLocation:
    """`auto`: the account's bucket for the region, below the caller's own prefix; `s3://BUCKET/PREFIX`:
    checked and used as named. Either must belong to `account`, which then goes with every request."""
    if url == "auto":
        bucket = auto_bucket(account, region)
        ensure_auto_bucket(s3, bucket, region, account, access, report)
        # Each user's runs live below their own id: their policy and every role's boundary reach no other.
        return StorageLocation(url="/".join(("s3:/", bucket, *([access.user] if access.user else []))),
                               container=bucket, prefix=access.user, owner=account)
    if not url.startswith("s3://"):
        raise ConfigError(f"storage: {url!r}: on AWS, runs are kept in S3", hint="storage: auto, or s3://BUCKET/PREFIX")
    location = replace(parse_s3_url(url), owner=account)
    check_named_bucket(s3, location.container, region, account, access.create, report)
    return location


def setup_command(region: str) -> str:
    """The administrator's one-time step that makes and locks down a region's auto bucket."""
    return f"xeoncluster storage init --provider aws --region {region}"


def ensure_auto_bucket(s3: Any, bucket: str, region: str, owner: str, access: Access,
                       report: Callable[[str], None]) -> None:
    """The account's bucket for this region: ours (another account's is refused), locked down, incomplete
    uploads aborted, tagged. With `create`: made when missing (a user's policy may not: they are told who
    does), and what it lacks of the lock-down named; `setup` (the administrator's) puts that back."""
    if aws_bucket.owned(s3, bucket, owner, auto=True):
        missing = aws_bucket.lacking(s3, bucket, owner) if access.create else []
        if missing and access.setup:
            aws_bucket.lock_down(s3, bucket, owner, missing)
            report(f"storage: bucket {bucket} lacked {', '.join(missing)}; fixed")
        elif missing:
            report(f"storage: warning: bucket {bucket} lacks {', '.join(missing)}; an administrator puts it back: "
                   f"{setup_command(region)}")
        return
    if not access.create:
        return
    settings = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    try:
        s3.create_bucket(Bucket=bucket, **settings)
    except ClientError as exc:
        if error_code(exc) == "BucketAlreadyExists":  # another account made it since the check
            raise aws_bucket.not_ours(bucket, owner, auto=True) from None
        if error_code(exc) in aws_bucket.DENIED:
            raise ConfigError(f"storage: the run bucket {bucket} does not exist, and your policy may not make it",
                              hint=f"an administrator makes it once per region: {setup_command(region)}") from None
        if error_code(exc) != "BucketAlreadyOwnedByYou":
            raise _bucket_error(bucket, exc) from None
    aws_bucket.lock_down(s3, bucket, owner)
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, ExpectedBucketOwner=owner, LifecycleConfiguration={"Rules": [{
        "ID": "xeoncluster-abort-incomplete-uploads", "Status": "Enabled", "Filter": {"Prefix": ""},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_INCOMPLETE_AFTER_DAYS}}]})
    s3.put_bucket_tagging(Bucket=bucket, ExpectedBucketOwner=owner,
                          Tagging={"TagSet": [{"Key": TAG_STORAGE, "Value": "runs"}]})


def check_named_bucket(s3: Any, bucket: str, region: str, owner: str, create: bool,
                       report: Callable[[str], None]) -> None:
    """A bucket the user names is used as it is: it must exist, be the account's, and be in the region.
    We change nothing on it; on `create` (up, train) a missing TLS-only policy is one warning line."""
    if not aws_bucket.owned(s3, bucket, owner, auto=False):
        raise ConfigError(f"storage: bucket {bucket} does not exist", hint="create it first, or use storage: auto")
    try:
        found = s3.get_bucket_location(Bucket=bucket, ExpectedBucketOwner=owner)
        where = found.get("LocationConstraint") or "us-east-1"
    except ClientError as exc:
        raise _bucket_error(bucket, exc) from None
    if where != region:
        raise ConfigError(f"storage: bucket {bucket} is in {where}, the cluster in {region}",
                          hint=f"use a bucket in {region} (traffic between regions is slow and billed), "
                               "or storage: auto")
    if create and _lacks_tls_only_policy(s3, bucket, owner):
        report(f"storage: warning: bucket {bucket} does not deny requests without TLS (no aws:SecureTransport "
               "statement in its policy); docs/runs.md shows the one to add")


def _lacks_tls_only_policy(s3: Any, bucket: str, owner: str) -> bool:
    """False when the policy cannot be read: a policy of the user's may not grant s3:GetBucketPolicy."""
    try:
        return not aws_bucket.has_tls_only_policy(s3, bucket, owner)
    except ClientError as exc:
        if error_code(exc) in aws_bucket.DENIED:
            return False
        raise


def _bucket_error(bucket: str, exc: ClientError) -> ConfigError:
    code = error_code(exc)
    if code in aws_bucket.DENIED:
        return ConfigError(f"storage: no access to bucket {bucket} (someone else's, or your policy lacks it)",
                           hint="name a bucket you own, or use storage: auto")
    if code in aws_bucket.MISSING:
        return ConfigError(f"storage: bucket {bucket} does not exist", hint="create it first, or use storage: auto")
    if code == "BucketAlreadyExists":
        return ConfigError(f"storage: the bucket name {bucket} belongs to another account",
                           hint="name a bucket of your own: storage: s3://BUCKET/PREFIX")
    return ConfigError(f"storage: bucket {bucket}: {code}: {exc}")


class S3Storage:
    """Every request names the account that must own the bucket (ExpectedBucketOwner): S3 refuses it
    (403) when the bucket is anyone else's, so nothing is ever written to, or read from, a stranger's."""

    def __init__(self, s3: Any, location: StorageLocation) -> None:
        if not location.owner:
            raise ValueError(f"S3 storage {location.url} without the account that must own it")
        self.s3, self.location, self.owner = s3, location, location.owner
        self.expect = {"ExpectedBucketOwner": location.owner}
        # s3transfer aborts a failed multipart upload itself, without the transfer's ExtraArgs.
        s3.meta.events.register("provide-client-params.s3.AbortMultipartUpload", partial(_expect, location.owner),
                                unique_id=f"xeoncluster-expected-bucket-owner-{location.owner}")

    def put_file(self, path: Path, key: str) -> None:
        """From one open handle: upload_file takes the size from the path and opens it later, so a file
        renamed over it meanwhile (the agent rewrites run.json so) was stored cut short. The handle
        keeps the version it opened, and a file that grows (a log) is stored up to the size seen."""
        with path.open("rb") as handle:
            self.s3.upload_fileobj(handle, self.location.container, key, ExtraArgs=self.expect, Config=TRANSFER)

    def put_text(self, key: str, text: str) -> None:
        self.s3.put_object(Bucket=self.location.container, Key=key, Body=text.encode(), **self.expect)

    def get_file(self, key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.s3.download_file(self.location.container, key, str(path), ExtraArgs=self.expect, Config=TRANSFER)

    def get_text(self, key: str) -> str | None:
        try:
            body = self.s3.get_object(Bucket=self.location.container, Key=key, **self.expect)["Body"]
            return str(body.read().decode(errors="replace"))  # a master's role writes the runs kept here
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return None
            raise

    def objects(self, prefix: str) -> list[StoredObject]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.location.container, Prefix=prefix.rstrip("/") + "/" if prefix else "", **self.expect)
        try:
            return [StoredObject(o["Key"], int(o["Size"])) for page in pages for o in page.get("Contents", [])]
        except ClientError as exc:
            if error_code(exc) == "NoSuchBucket":  # the `auto` bucket before the first `up`: nothing kept yet
                return []
            raise

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start:start + 1000]]
            self.s3.delete_objects(Bucket=self.location.container, Delete={"Objects": batch, "Quiet": True},
                                   **self.expect)

    def copy(self, source: str, target: str) -> None:
        self.s3.copy_object(Bucket=self.location.container, Key=target,
                            CopySource={"Bucket": self.location.container, "Key": source},
                            ExpectedSourceBucketOwner=self.owner, **self.expect)

    def read_versioned(self, key: str) -> Versioned | None:
        """The version is the ETag, which S3 compares in IfMatch; reads after a write see it (S3 is
        strongly consistent)."""
        try:
            answer = self.s3.get_object(Bucket=self.location.container, Key=key, **self.expect)
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return None
            raise
        return Versioned(answer["Body"].read().decode(errors="replace"), str(answer["ETag"]))

    def write_if(self, key: str, text: str, version: str | None) -> str:
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        try:
            answer = self.s3.put_object(Bucket=self.location.container, Key=key, Body=text.encode(),
                                        **condition, **self.expect)
        except ClientError as exc:
            if error_code(exc) in LOST_RACE:
                raise StaleVersion(f"s3://{self.location.container}/{key}: changed since version "
                                   f"{version or '(none)'} was read ({error_code(exc)})") from None
            raise
        return str(answer["ETag"])


def _expect(owner: str, params: dict[str, Any], **_: Any) -> None:
    params.setdefault("ExpectedBucketOwner", owner)
