"""run_instances retries: throttling and transient errors are retried (same ClientToken), capacity
errors never are, even though real EC2 sends InsufficientInstanceCapacity as HTTP 500, which
botocore's own retry modes treat as transient.

The faults are answered by moto's EC2 response handler with a crafted HTTP status, so they travel
the real wire path: serialisation, botocore's parser and its retry handler."""
from __future__ import annotations

import time

import pytest
from aws_helpers import PUBLIC_KEY, cluster_config
from botocore.exceptions import ClientError, EndpointConnectionError

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.aws.clients import NO_RETRIES, OPTIONAL_RETRIES, RUN_ATTEMPTS, is_retryable
from xeoncluster.providers.base import LaunchRequest

ERROR_XML = ('<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
             '<Message>{message}</Message></Error></Errors><RequestID>req-1</RequestID></Response>')


class Wire:
    """Patches moto's RunInstances handler: the first `times` requests get an HTTP error."""

    def __init__(self, monkeypatch, ec2, code, status, times, message="injected"):
        from moto.ec2.responses.instances import InstanceResponse

        self.zones = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]}
        self.requests: list[tuple[str, str]] = []  # (zone, client token)
        real = InstanceResponse.run_instances
        wire = self

        def run_instances(handler):
            nics = handler._get_param("NetworkInterfaces", []) or [{}]
            wire.requests.append((wire.zones.get(nics[0].get("SubnetId"), "?"), handler._get_param("ClientToken")))
            if len(wire.requests) <= times:
                return ERROR_XML.format(code=code, message=message), {"status": status}
            return real(handler)

        monkeypatch.setattr(InstanceResponse, "run_instances", run_instances)


@pytest.fixture
def prepared(provider):
    cluster = cluster_config(nodes=2, zones=["us-east-1a", "us-east-1b"])
    provider.prepare(cluster, PUBLIC_KEY)
    return cluster


def statuses(client):
    seen = []
    client.meta.events.register("after-call.ec2.RunInstances",
                                lambda http_response, **_: seen.append(http_response.status_code))
    return seen


def test_capacity_error_as_http_500_is_one_attempt_per_zone(provider, ec2, prepared, events, monkeypatch):
    wire = Wire(monkeypatch, ec2, "InsufficientInstanceCapacity", 500, times=1,
                message="We currently do not have sufficient c7i.2xlarge capacity in the Availability Zone "
                        "you requested")
    seen = statuses(provider.clients.ec2_no_retries)
    nodes = provider.launch(LaunchRequest(prepared, 2, None, "worker", 0))
    assert [zone for zone, _ in wire.requests] == ["us-east-1a", "us-east-1b"]
    assert seen == [500, 200]
    assert {n.zone for n in nodes} == {"us-east-1b"}
    assert any("us-east-1a unavailable (InsufficientInstanceCapacity: We currently do not have sufficient" in e
               for e in events)


def test_botocore_alone_would_retry_that_500_in_the_same_zone(provider, ec2, prepared, monkeypatch):
    """Why run_instances has its own client: the provider's ordinary (adaptive) client retries it."""
    wire = Wire(monkeypatch, ec2, "InsufficientInstanceCapacity", 500, times=99)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)  # botocore's backoff between attempts
    subnet = next(s for s, z in wire.zones.items() if z == "us-east-1a")
    with pytest.raises(ClientError):
        provider.ec2.run_instances(ImageId="ami-785db401", MinCount=1, MaxCount=1, InstanceType="c7i.2xlarge",
                                   SubnetId=subnet)
    assert len(wire.requests) == 11


def test_throttling_is_retried_with_the_same_client_token(provider, ec2, prepared, events, monkeypatch):
    wire = Wire(monkeypatch, ec2, "RequestLimitExceeded", 503, times=2, message="Request limit exceeded.")
    slept = []
    provider.sleep = slept.append
    nodes = provider.launch(LaunchRequest(prepared, 2, None, "worker", 0))
    assert [zone for zone, _ in wire.requests] == ["us-east-1a"] * 3
    assert len({token for _, token in wire.requests}) == 1
    assert len(slept) == 2 and all(0 < s <= 20 for s in slept)
    assert sum("RequestLimitExceeded: Request limit exceeded.; retrying in" in e for e in events) == 2
    assert len(nodes) == 2 and len(provider.nodes(prepared)) == 2  # one fleet, not three


def test_throttling_that_never_ends_fails_after_the_attempt_budget(provider, ec2, prepared, monkeypatch):
    wire = Wire(monkeypatch, ec2, "RequestLimitExceeded", 503, times=99)
    with pytest.raises(ProviderError, match="RequestLimitExceeded"):
        provider.launch(LaunchRequest(prepared, 2, None, "worker", 0))
    assert len(wire.requests) == RUN_ATTEMPTS
    assert {zone for zone, _ in wire.requests} == {"us-east-1a"}  # throttling is not a capacity problem


def test_transient_internal_error_is_retried(provider, prepared, aws):
    aws.fail("RunInstances", "InternalError")
    nodes = provider.launch(LaunchRequest(prepared, 2, None, "worker", 0))
    tokens = [p["ClientToken"] for _, op, p in aws.calls if op == "RunInstances"]
    assert len(tokens) == 2 and tokens[0] == tokens[1]
    assert len(nodes) == 2


@pytest.mark.parametrize(("error", "retry"), [
    (("InsufficientInstanceCapacity", 500), False),
    (("InsufficientInstanceCapacity", 400), False),
    (("SpotMaxPriceTooLow", 400), False),
    (("RequestLimitExceeded", 503), True),
    (("Throttling", 400), True),
    (("InternalError", 500), True),
    (("ServiceUnavailable", 503), True),
    (("SomethingElse", 502), True),
    (("InvalidParameterValue", 400), False),
    (("UnauthorizedOperation", 403), False),
])
def test_retry_classification(error, retry):
    code, status = error
    exc = ClientError({"Error": {"Code": code, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                      "RunInstances")
    assert is_retryable(exc) is retry


def test_connection_errors_are_retried():
    assert is_retryable(EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com"))


def test_client_configurations(provider):
    assert provider.clients.ec2_no_retries.meta.config.retries == NO_RETRIES
    assert provider.clients.ec2_no_retries is not provider.ec2
    assert provider._pricing().meta.config.retries == OPTIONAL_RETRIES
