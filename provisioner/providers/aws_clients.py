"""boto3 session and clients for one provider instance, tags, and AWS error classification."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import boto3
from botocore.config import Config
from botocore.exceptions import (BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError,
                                 ProfileNotFound)

from ..errors import ConfigError, ProviderError
from .base import TAG_CLUSTER, TAG_IMAGE_KEY, TAG_ROLE

TAG_INDEX_BASE = "xeoncluster:index-base"
TAG_KEY_DIGEST = "xeoncluster:public-key-sha256"

RETRIES = {"mode": "adaptive", "max_attempts": 10}
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

    @property
    def session(self) -> boto3.Session:
        if self._session is None:
            try:
                self._session = boto3.Session(profile_name=self.profile, region_name=self.region)
            except ProfileNotFound:
                raise ConfigError(f"AWS profile '{self.profile}' not found", hint=CREDENTIALS_HINT) from None
        return self._session

    def client(self, service: str, region: str | None = None) -> Any:
        key = f"{service}@{region or self.region}"
        if key not in self._clients:
            config = Config(retries=dict(RETRIES), user_agent_extra="xeoncluster")
            made = self.session.client(service, region_name=region or self.region, config=config)
            made.meta.events.register("before-call", self._record)
            self._clients[key] = made
        return self._clients[key]

    @property
    def ec2(self) -> Any:
        return self.client("ec2")

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


def is_credentials_error(exc: BaseException) -> bool:
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return True
    return isinstance(exc, ClientError) and error_code(exc) in AUTH_CODES


def provider_error(doing: str, exc: BaseException) -> ProviderError:
    if is_credentials_error(exc):
        return ProviderError(f"{doing}: {error_text(exc)}", hint=CREDENTIALS_HINT)
    return ProviderError(f"{doing}: {error_text(exc)}")


def cluster_tags(cluster: str, role: str, **extra: str) -> list[dict[str, str]]:
    tags = {TAG_CLUSTER: cluster, TAG_ROLE: role, **extra}
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tag_specs(tags: list[dict[str, str]], *resource_types: str) -> list[dict[str, Any]]:
    return [{"ResourceType": rt, "Tags": tags} for rt in resource_types]


def cluster_filter(cluster: str) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}]


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
