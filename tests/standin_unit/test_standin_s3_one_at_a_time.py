"""The stand-in's S3 under calls at once on one key, as the master's agent (storing run.json every 30 s)
and the CLI (reading it) make them. moto alone, served threaded, fails some of them with a 500 (it
closes an overwritten object's buffer while another call still reads it)."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import boto3
import pytest
from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from xeoncluster.standin.one_at_a_time import OneAtATime

BODY = b'{"run": "durable", "padding": "' + b"x" * 4000 + b'"}'


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = make_server("127.0.0.1", 0, OneAtATime(DomainDispatcherApplication(create_backend_app)),
                         threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.port}"
    server.shutdown()


def test_puts_and_gets_of_one_key_at_once_all_succeed_whole(endpoint: str) -> None:
    def client() -> object:
        return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                            aws_secret_access_key="testing",
                            config=boto3.session.Config(retries={"total_max_attempts": 1}))

    client().create_bucket(Bucket="bucket")  # type: ignore[attr-defined]
    client().put_object(Bucket="bucket", Key="c/runs/r/run.json", Body=BODY)  # type: ignore[attr-defined]
    problems: list[str] = []
    stop = time.monotonic() + 8

    def put() -> None:
        s3 = client()
        while time.monotonic() < stop:
            try:
                s3.put_object(Bucket="bucket", Key="c/runs/r/run.json", Body=BODY)  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - every failure is what the test counts
                problems.append(f"put: {exc}")

    def get() -> None:
        s3 = client()
        while time.monotonic() < stop:
            try:
                got = s3.get_object(Bucket="bucket", Key="c/runs/r/run.json")["Body"].read()  # type: ignore[attr-defined]
                if got != BODY:
                    problems.append(f"get: {got[:40]!r}")
            except Exception as exc:  # noqa: BLE001
                problems.append(f"get: {exc}")

    def listing() -> None:
        s3 = client()
        while time.monotonic() < stop:
            s3.list_objects_v2(Bucket="bucket", Prefix="c/runs/")  # type: ignore[attr-defined]

    threads = [threading.Thread(target=work) for work in (put, put, put, put, get, get, listing)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
