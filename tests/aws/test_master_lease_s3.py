"""The master lease on S3 (moto): conditional writes as S3 answers them (IfNoneMatch create-only, IfMatch
on the ETag read, 412 and 404 as a lost race), every request still naming the bucket's owner, two
takers of one stale lease of which exactly one wins, a hand-over's next epoch, and a forged lease
refused in one line."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_helpers import REGION
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from moto import mock_aws
from s3_owner import OwnerCheck

from xeoncluster.cluster.master_lease import LeaseBook
from xeoncluster.cluster.untrusted import Refused
from xeoncluster.providers.aws.spec import AWS
from xeoncluster.providers.aws.storage import S3Storage
from xeoncluster.storage.base import StaleVersion, StorageLocation, Versioned

ACCOUNT = "123456789012"  # moto's
BUCKET = "team-runs"
A, B = "i-0aaaaaaaaaaaaaaaa", "i-0bbbbbbbbbbbbbbbb"
KEY = "ml/c1/master-lease.json"


def location(owner: str = ACCOUNT) -> StorageLocation:
    return StorageLocation(url=f"s3://{BUCKET}/ml", container=BUCKET, prefix="ml", owner=owner)


@pytest.fixture
def client(aws_env: None) -> Iterator[Any]:
    with mock_aws():
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        yield boto3.client("s3", region_name=REGION)


@pytest.fixture
def owner_check(client: Any, monkeypatch: pytest.MonkeyPatch) -> OwnerCheck:
    check = OwnerCheck()
    check.install(monkeypatch)
    return check


@pytest.fixture
def storage(client: Any) -> S3Storage:
    return S3Storage(client, location())


@pytest.fixture
def book(storage: S3Storage) -> LeaseBook:
    return LeaseBook(storage, "c1", AWS.instance_id)


def test_create_only_refuses_a_second_create_and_the_version_is_the_etag(storage: S3Storage, client: Any) -> None:
    assert storage.read_versioned(KEY) is None
    version = storage.write_if(KEY, "one", None)
    with pytest.raises(StaleVersion, match="PreconditionFailed"):
        storage.write_if(KEY, "two", None)
    assert storage.read_versioned(KEY) == Versioned("one", version)
    assert client.head_object(Bucket=BUCKET, Key=KEY)["ETag"] == version


def test_a_version_since_replaced_is_refused(storage: S3Storage) -> None:
    first = storage.write_if(KEY, "one", None)
    second = storage.write_if(KEY, "two", first)
    with pytest.raises(StaleVersion, match="PreconditionFailed"):
        storage.write_if(KEY, "three", first)
    assert storage.read_versioned(KEY) == Versioned("two", second)


def test_a_version_of_a_removed_object_is_refused(storage: S3Storage) -> None:
    version = storage.write_if(KEY, "one", None)
    storage.delete([KEY])
    with pytest.raises(StaleVersion, match="NoSuchKey"):
        storage.write_if(KEY, "two", version)
    assert storage.read_versioned(KEY) is None


def test_conditional_requests_name_the_owner_and_anothers_bucket_is_no_lost_race(
        client: Any, owner_check: OwnerCheck) -> None:
    version = S3Storage(client, location()).write_if(KEY, "one", None)
    S3Storage(client, location()).read_versioned(KEY)
    with pytest.raises(ClientError, match="AccessDenied"):
        S3Storage(client, location("999999999999")).write_if(KEY, "two", version)
    sent = [(r.operation, r.owner) for r in owner_check.requests]
    assert sent == [("PutObject", ACCOUNT), ("GetObject", ACCOUNT), ("PutObject", "999999999999")]


def test_two_takers_of_a_stale_lease_one_after_the_other_exactly_one_wins(book: LeaseBook) -> None:
    book.take(A, "node0", now=100, stale_after=30)
    won = [book.take(holder, name, now=200, stale_after=30) for holder, name in (
        ("i-0cccccccccccccccc", "node2"), (B, "node1"))]
    assert [lease.epoch if lease else None for lease in won] == [2, None]


def test_a_taker_that_read_before_another_wrote_loses(book: LeaseBook, client: Any) -> None:
    """B reads and writes between A's read and A's write: A's IfMatch names the ETag it read, now gone."""
    book.take(A, "node0", now=100, stale_after=30)
    late: list[Any] = []

    def b_first(**_: Any) -> None:
        if not late:  # B's own PutObject passes here too
            late.append(None)
            late[0] = book.take(B, "node1", now=200, stale_after=30)

    client.meta.events.register("before-call.s3.PutObject", b_first)
    lost = book.take("i-0cccccccccccccccc", "node2", now=200, stale_after=30)
    client.meta.events.unregister("before-call.s3.PutObject", b_first)
    assert lost is None and late[0] is not None
    assert book.current() == late[0] and (late[0].epoch, late[0].holder) == (2, B)


def test_hand_over_bumps_the_epoch_and_fences_the_old_holder(book: LeaseBook) -> None:
    lease = book.take(A, "node0", now=100, stale_after=30)
    assert lease is not None
    successor = book.hand_over(book.renew(lease, now=110), B, "node1", now=111)
    assert (successor.epoch, successor.holder, successor.holder_name) == (2, B, "node1")
    assert book.holds(successor) and not book.holds(lease)
    with pytest.raises(StaleVersion):
        book.renew(lease, now=112)


@pytest.mark.parametrize("holder", ["i-0abc$(reboot)", "xc-c1-node1", "i-0ABCDEF12"])
def test_a_forged_lease_with_a_bad_holder_is_refused_in_one_line(book: LeaseBook, storage: S3Storage,
                                                                 holder: str) -> None:
    storage.put_text(KEY, json.dumps({"epoch": 7, "holder": holder, "holder_name": "node1", "renewed_at": 1.0}))
    with pytest.raises(Refused) as refused:
        book.current()
    line = refused.value.one_line()
    assert len(line.splitlines()) == 1 and line.startswith(f"s3://{BUCKET}/ml/c1/master-lease.json")
    assert holder in line or repr(holder) in line
    with pytest.raises(Refused):
        book.take(A, "node0", now=10**6, stale_after=30)


def test_a_conflicting_write_under_way_409_is_a_lost_race(storage: S3Storage, client: Any) -> None:
    """AWS may answer 409 ConditionalRequestConflict, which moto never does: given here before the call."""
    conflict = {"Error": {"Code": "ConditionalRequestConflict", "Message": "A conflicting operation is in progress"},
                "ResponseMetadata": {"HTTPStatusCode": 409}}
    answer = AWSResponse(f"https://{BUCKET}.s3.amazonaws.com/{KEY}", 409, {}, None)
    client.meta.events.register("before-call.s3.PutObject", lambda **_: (answer, conflict))
    with pytest.raises(StaleVersion, match="ConditionalRequestConflict"):
        storage.write_if(KEY, "one", None)
