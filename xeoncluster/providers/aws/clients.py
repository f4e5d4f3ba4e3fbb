"""boto3 session and clients for one provider instance, tags, and AWS error classification."""
from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers.base import TAG_CLUSTER, TAG_IMAGE_KEY, TAG_OWNER, TAG_ROLE

TAG_INDEX_BASE = "xeoncluster:index-base"
TAG_KEY_DIGEST = "xeoncluster:public-key-sha256"

RETRIES = {"mode": "adaptive", "max_attempts": 10}
# run_instances gets a client without botocore retries: EC2 answers InsufficientInstanceCapacity with
# HTTP 500, which botocore treats as transient and would retry 10 times in the same zone. The
# provider retries that call itself (`call_retrying`): throttling and transient errors yes, capacity no.
NO_RETRIES = {"mode": "standard", "total_max_attempts": 1}
RUN_ATTEMPTS = 8
# Optional, estimate-only APIs (Pricing, Service Quotas): a failure becomes a note or a catalog price,
# so one retry is enough; ten adaptive retries of an endpoint that answers 500 take about a minute.
OPTIONAL_RETRIES = {"mode": "standard", "total_max_attempts": 2}
THROTTLING_CODES = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
    "RequestThrottledException", "TooManyRequestsException", "EC2ThrottledException", "SlowDown",
    "BandwidthLimitExceeded", "LimitExceededException", "PriorRequestNotComplete",
})
TRANSIENT_CODES = frozenset({
    "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable", "RequestTimeout",
    "RequestTimeoutException",
})
MUTATING_PREFIXES = ("Create", "Run", "Request", "Import", "Authorize", "Revoke", "Terminate", "Delete",
                     "Deregister", "Cancel", "Modify", "Associate", "Put", "Register", "Start", "Stop")
CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity", "InsufficientCapacity", "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded", "InsufficientHostCapacity", "Unsupported",
})
AUTH_CODES = frozenset({
    "InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException",
    "UnrecognizedClientException", "AuthFailure", "InvalidAccessKeyId", "AccessDenied",
    "AccessDeniedException", "UnauthorizedOperation", "OptInRequired",
})
CREDENTIALS_HINT = "run `aws configure`, pass --profile, or set AWS_PROFILE / AWS_ACCESS_KEY_ID"


def is_mutating(operation: str) -> bool:
    return operation.startswith(MUTATING_PREFIXES)


@dataclass(frozen=True)
class ApiCall:
    service: str
    operation: str

    @property
    def mutating(self) -> bool:
        return is_mutating(self.operation)


@dataclass
class AwsClients:
    """One boto3 session per provider; clients are made on first use and every call is recorded."""

    region: str
    profile: str | None = None
    calls: list[ApiCall] = field(default_factory=list)
    _session: boto3.Session | None = None
    _clients: dict[str, Any] = field(default_factory=dict)
    # boto3 clients are thread-safe once made; making them (and the session) is not.
    _making: threading.Lock = field(default_factory=threading.Lock)

    @property
    def session(self) -> boto3.Session:
        with self._making:
            return self._made_session()

    def _made_session(self) -> boto3.Session:
        if self._session is None:
            try:
                self._session = boto3.Session(profile_name=self.profile, region_name=self.region)
            except ProfileNotFound as exc:
                # The profile may come from AWS_PROFILE rather than --profile: name the one botocore looked for.
                raise ConfigError(f"AWS profile '{exc.kwargs.get('profile', self.profile)}' not found",
                                  hint=CREDENTIALS_HINT) from None
        return self._session

    def client(self, service: str, region: str | None = None, retries: dict[str, Any] | None = None) -> Any:
        key = f"{service}@{region or self.region}" + ("" if retries is None else f"#{sorted(retries.items())}")
        with self._making:
            if key not in self._clients:
                config = Config(retries=dict(retries or RETRIES), user_agent_extra="xeoncluster")
                made = self._made_session().client(service, region_name=region or self.region, config=config)
                made.meta.events.register("before-call", self._record)
                self._clients[key] = made
            return self._clients[key]

    @property
    def ec2(self) -> Any:
        return self.client("ec2")

    @property
    def ec2_no_retries(self) -> Any:
        """For run_instances only: its retries are `call_retrying`'s, which never retry capacity errors."""
        return self.client("ec2", retries=NO_RETRIES)

    def _record(self, model: Any, **_: Any) -> None:
        self.calls.append(ApiCall(model.service_model.service_name, model.name))


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", "Unknown"))
    return type(exc).__name__


def error_text(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        message = exc.response.get("Error", {}).get("Message", "")
        return f"{error_code(exc)}: {message}".strip().rstrip(":").splitlines()[0]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def is_capacity_error(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) and error_code(exc) in CAPACITY_CODES


def is_retryable(exc: BaseException) -> bool:
    """Throttling and transient failures; never capacity, whatever HTTP status it came with."""
    if isinstance(exc, ClientError):
        code = error_code(exc)
        if code in CAPACITY_CODES:
            return False
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return (code in THROTTLING_CODES or code in TRANSIENT_CODES or status in (502, 503, 504)
                or _profile_not_ready(exc))
    return isinstance(exc, (BotoConnectionError, HTTPClientError))


def _profile_not_ready(exc: ClientError) -> bool:
    """EC2 learns of a new instance profile some seconds after IAM created it (eventual consistency)."""
    message = str(exc.response.get("Error", {}).get("Message", ""))
    return error_code(exc) == "InvalidParameterValue" and "iamInstanceProfile" in message


T = TypeVar("T")


def call_retrying(call: Callable[[], T], sleep: Callable[[float], None], attempts: int = RUN_ATTEMPTS,
                  on_retry: Callable[[str], None] = lambda message: None) -> T:
    """Run `call` up to `attempts` times with jittered exponential backoff on `is_retryable` errors.

    The call must be idempotent on retry (run_instances is: it carries a ClientToken).
    """
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except (ClientError, BotoCoreError) as exc:
            if attempt == attempts or not is_retryable(exc):
                raise
            delay = random.uniform(0.5, 1.0) * min(20.0, 2.0 ** attempt)
            on_retry(f"{error_text(exc)}; retrying in {delay:.1f}s ({attempt}/{attempts - 1})")
            sleep(delay)
    raise AssertionError("unreachable")


def is_credentials_error(exc: BaseException) -> bool:
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return True
    return isinstance(exc, ClientError) and error_code(exc) in AUTH_CODES


def provider_error(doing: str, exc: BaseException) -> ProviderError:
    if is_credentials_error(exc):
        return ProviderError(f"{doing}: {error_text(exc)}", hint=CREDENTIALS_HINT)
    return ProviderError(f"{doing}: {error_text(exc)}")


def cluster_tags(cluster: str, role: str, owner: str, **extra: str) -> list[dict[str, str]]:
    """`owner`: the creating identity's UserId (owner.py), which the user's policy requires; empty
    only for the run agent of a cluster made before owners were recorded."""
    tags = {TAG_CLUSTER: cluster, TAG_ROLE: role, **({TAG_OWNER: owner} if owner else {}), **extra}
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tag_specs(tags: list[dict[str, str]], *resource_types: str) -> list[dict[str, Any]]:
    return [{"ResourceType": rt, "Tags": tags} for rt in resource_types]


def cluster_filter(cluster: str, owner: str | None = None) -> list[dict[str, Any]]:
    """The cluster's resources; with `owner`, only those its owner tag gives to `owner`: a resource a
    colleague (or a master's role) tagged with our cluster's name is not ours. "" or None: any owner
    (a run agent of a cluster made before owners were recorded)."""
    owned = [{"Name": f"tag:{TAG_OWNER}", "Values": [owner]}] if owner else []
    return [{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}, *owned]


def image_key_filter(key: str) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{TAG_IMAGE_KEY}", "Values": [key]}]


def tags_of(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", []) or []}


def paginate(client: Any, operation: str, result_key: str, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in client.get_paginator(operation).paginate(**kwargs):
        items.extend(page.get(result_key, []))
    return items


def chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def guarded(doing: str, call: Callable[[], Any]) -> Any:
    """Run one AWS call; turn botocore failures into a one-line ProviderError."""
    try:
        return call()
    except (ClientError, BotoCoreError) as exc:
        raise provider_error(doing, exc) from exc


@contextmanager
def translated(doing: str) -> Iterator[None]:
    """Turn botocore failures inside the block into a one-line ProviderError."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise provider_error(doing, exc) from exc
