"""S3 as run storage: the account's default bucket (made once, locked down), a bucket the user names
(used as it is, after checking it is reachable and in the cluster's region), and the objects in it."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from ..errors import ConfigError
from ..storage.base import StorageLocation, StoredObject
from .aws_clients import error_code

TAG_STORAGE = "xeoncluster:storage"
# Multipart uploads that never finish (an agent that died mid-upload) are billed until aborted.
ABORT_INCOMPLETE_AFTER_DAYS = 7
TRANSFER = TransferConfig(multipart_threshold=64 * 2**20, multipart_chunksize=64 * 2**20, max_concurrency=4)


def auto_bucket(account: str, region: str) -> str:
    return f"xeoncluster-{account}-{region}"


def parse_s3_url(url: str) -> StorageLocation:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not url.startswith("s3://") or not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
        raise ConfigError(f"storage: {url!r} is not an S3 location such as s3://my-bucket/runs",
                          hint="bucket names are 3-63 lowercase letters, digits, '-' and '.'; or use storage: auto")
    return StorageLocation(url=url.rstrip("/"), bucket=bucket, prefix=prefix.strip("/"))


def resolve(s3: Any, url: str, account: str, region: str, create: bool) -> StorageLocation:
    """`auto`: the account's bucket for the region (made if `create`); `s3://BUCKET/PREFIX`: checked."""
    if url == "auto":
        bucket = auto_bucket(account, region)
        ensure_auto_bucket(s3, bucket, region, create)
        return StorageLocation(url=f"s3://{bucket}", bucket=bucket)
    if not url.startswith("s3://"):
        raise ConfigError(f"storage: {url!r}: on AWS, runs are kept in S3", hint="storage: auto, or s3://BUCKET/PREFIX")
    location = parse_s3_url(url)
    check_named_bucket(s3, location.bucket, region)
    return location


def ensure_auto_bucket(s3: Any, bucket: str, region: str, create: bool) -> None:
    """The account's bucket for this region: private, encrypted, incomplete uploads aborted, tagged."""
    try:
        s3.head_bucket(Bucket=bucket)
        return
    except ClientError as exc:
        if error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
            raise _bucket_error(bucket, exc) from None
    if not create:
        return
    settings = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    try:
        s3.create_bucket(Bucket=bucket, **settings)
    except ClientError as exc:
        if error_code(exc) != "BucketAlreadyOwnedByYou":
            raise _bucket_error(bucket, exc) from None
    _lock_down(s3, bucket)


def _lock_down(s3: Any, bucket: str) -> None:
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True})
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [{
        "ID": "xeoncluster-abort-incomplete-uploads", "Status": "Enabled", "Filter": {"Prefix": ""},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_INCOMPLETE_AFTER_DAYS}}]})
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": TAG_STORAGE, "Value": "runs"}]})


def check_named_bucket(s3: Any, bucket: str, region: str) -> None:
    """A bucket the user names is used as it is: it must exist, be ours to use, and be in the region."""
    try:
        s3.head_bucket(Bucket=bucket)
        where = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
    except ClientError as exc:
        raise _bucket_error(bucket, exc) from None
    if where != region:
        raise ConfigError(f"storage: bucket {bucket} is in {where}, the cluster in {region}",
                          hint=f"use a bucket in {region} (traffic between regions is slow and billed), "
                               "or storage: auto")


def _bucket_error(bucket: str, exc: ClientError) -> ConfigError:
    code = error_code(exc)
    if code in ("403", "AccessDenied", "AllAccessDisabled"):
        return ConfigError(f"storage: no access to bucket {bucket} (someone else's, or your policy lacks it)",
                           hint="name a bucket you own, or use storage: auto")
    if code in ("404", "NoSuchBucket", "NotFound"):
        return ConfigError(f"storage: bucket {bucket} does not exist", hint="create it first, or use storage: auto")
    if code == "BucketAlreadyExists":
        return ConfigError(f"storage: the bucket name {bucket} belongs to another account",
                           hint="name a bucket of your own: storage: s3://BUCKET/PREFIX")
    return ConfigError(f"storage: bucket {bucket}: {code}: {exc}")


class S3Storage:
    def __init__(self, s3: Any, location: StorageLocation) -> None:
        self.s3, self.location = s3, location

    def put_file(self, path: Path, key: str) -> None:
        self.s3.upload_file(str(path), self.location.bucket, key, Config=TRANSFER)

    def put_text(self, key: str, text: str) -> None:
        self.s3.put_object(Bucket=self.location.bucket, Key=key, Body=text.encode())

    def get_file(self, key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.s3.download_file(self.location.bucket, key, str(path), Config=TRANSFER)

    def get_text(self, key: str) -> str | None:
        try:
            return str(self.s3.get_object(Bucket=self.location.bucket, Key=key)["Body"].read().decode())
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return None
            raise

    def objects(self, prefix: str) -> list[StoredObject]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.location.bucket,
                                                                   Prefix=prefix.rstrip("/") + "/" if prefix else "")
        try:
            return [StoredObject(o["Key"], int(o["Size"])) for page in pages for o in page.get("Contents", [])]
        except ClientError as exc:
            if error_code(exc) == "NoSuchBucket":  # the `auto` bucket before the first `up`: nothing kept yet
                return []
            raise

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start:start + 1000]]
            self.s3.delete_objects(Bucket=self.location.bucket, Delete={"Objects": batch, "Quiet": True})

    def copy(self, source: str, target: str) -> None:
        self.s3.copy_object(Bucket=self.location.bucket, Key=target,
                            CopySource={"Bucket": self.location.bucket, "Key": source})
