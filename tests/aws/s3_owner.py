"""S3's bucket-owner check, which moto leaves out, put back for tests, and a record of what was sent.

moto 5.2.1 keeps one bucket namespace across accounts (a bucket made with MOTO_ACCOUNT_ID=OTHER
belongs to OTHER, and other accounts can still reach it) but ignores `x-amz-expected-bucket-owner`.
Real S3 answers 403 when that header names another account than the bucket's. `OwnerCheck` wraps
moto's request stubber: it records every S3 request as sent on the wire (operation, bucket, owner
headers) and answers a mismatched owner with 403, as S3 does.

Requests whose User-Agent carries TEST_AGENT (the test's own assertion clients) are neither recorded
nor checked.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from moto.core.botocore_stubber import BotocoreStubber, MockRawResponse
from moto.s3.models import s3_backends

TEST_AGENT = "xc-test-assertions"
OWNER_HEADER = "x-amz-expected-bucket-owner"
SOURCE_OWNER_HEADER = "x-amz-source-expected-bucket-owner"
DENIED = "<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code><Message>Denied</Message></Error>"


@dataclass(frozen=True)
class S3Request:
    operation: str
    bucket: str | None
    owner: str | None
    source_owner: str | None


@dataclass
class OwnerCheck:
    requests: list[S3Request] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = BotocoreStubber.__call__
        check = self

        def call(stubber: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> AWSResponse | None:
            if stubber.enabled and event_name.startswith("before-send.s3."):
                refused = check.see(event_name.split(".")[2], request)
                if refused is not None:
                    return refused
            return real(stubber, event_name, request, **kwargs)

        monkeypatch.setattr(BotocoreStubber, "__call__", call)

    def see(self, operation: str, request: Any) -> AWSResponse | None:
        headers = {k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()}
        if TEST_AGENT in headers.get("user-agent", ""):
            return None
        bucket = bucket_of(request.url)
        self.requests.append(S3Request(operation, bucket, headers.get(OWNER_HEADER),
                                       headers.get(SOURCE_OWNER_HEADER)))
        owner = s3_backends.bucket_accounts.get(bucket or "", (None, None))[1]
        expected = headers.get(OWNER_HEADER)
        if owner is not None and expected is not None and expected != owner:
            return AWSResponse(request.url, 403, {"Content-Type": "application/xml"}, MockRawResponse(DENIED))
        return None


def bucket_of(url: str) -> str | None:
    """The bucket a request is for, in virtual-hosted (BUCKET.s3...) or path (s3.../BUCKET) style."""
    parts = urlsplit(url)
    host, path = parts.hostname or "", parts.path.lstrip("/")
    if ".s3." in f".{host}" and not host.startswith("s3."):
        return host.split(".s3.")[0]
    return path.split("/")[0] or None


def assertion_client(region: str) -> Any:
    """A client for the test's own setup and assertions: not recorded, not checked."""
    return boto3.client("s3", region_name=region, config=Config(user_agent_extra=TEST_AGENT))


def bucket_of_another_account(monkeypatch: pytest.MonkeyPatch, bucket: str, region: str, account: str) -> None:
    with monkeypatch.context() as scoped:
        scoped.setenv("MOTO_ACCOUNT_ID", account)
        settings = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        assertion_client(region).create_bucket(Bucket=bucket, **settings)
    assert s3_backends.bucket_accounts[bucket][1] == account
