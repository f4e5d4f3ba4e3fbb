"""Reusable moto fixtures for AWS tests (provider-level here; the CLI-level tests can reuse them).

- `aws_env` (autouse): fake credentials, no real profile/endpoint/IMDS, no non-loopback sockets.
- `aws`: an in-process moto account with the moto gaps filled in (see below and aws_helpers.py).
- `api`: an `ApiRecorder` that records every boto3 call of any client and injects faults.
- `make_provider` / `provider`, `cluster_config`: AwsProvider with a fake caller IP.
- `xc`: runs the real CLI entry point (`xeoncluster ...`) under moto with the SSH seam replaced by
  a RecordingShell (`shell`, recording_shell.py); state goes to a temporary XEONCLUSTER_HOME.

moto workarounds (moto 5.2.1):
- The Ubuntu 24.04 SSM parameter is missing: `seed_ubuntu_parameter` appends it to moto's SSM
  backend directly (put_parameter refuses names under /aws/).
- Placement groups raise NotImplementedError: `ApiRecorder` answers Create/Describe/Delete
  PlacementGroup(s) from a small in-memory fake before moto sees them.
- The default VPC has no internet gateway, hence no default route, which preflight requires:
  `seed_default_vpc_internet_route` adds one, as a real default VPC has (in REGION only).
- moto builds ~1200 AMIs per region backend (slow): `trim_moto_amis` keeps the Ubuntu one.
- (speed) `share_botocore_loader`: one botocore data loader for all sessions in a test.
- create_image with a "snapshot" TagSpecification raises NotImplementedError: the backend method
  is wrapped to tag the AMI's snapshot itself.
- A bucket policy's TLS-only Deny (`aws:SecureTransport` false) denies every object request under
  moto, which cannot evaluate Bool: `xeoncluster.standin.moto_s3_policy` evaluates such policies as over TLS.
"""
from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.client
import pytest
from aws_helpers import (
    CALLER_IP,
    REGION,
    ApiRecorder,
    cluster_config,
    create_image_with_snapshot_tags,
    profile_on_every_instance_of_a_launch,
    seed_default_vpc_internet_route,
    seed_ubuntu_parameter,
    share_botocore_loader,
    trim_moto_amis,
    write_config,
)
from gated_server import gated  # noqa: F401 - moto's server behind the stand-in's IAM gate
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from recording_shell import ShellLog

from xeoncluster.providers.aws.boundary import BOUNDARY_NAME, boundary_document
from xeoncluster.providers.aws.provider import AwsProvider
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.standin import moto_s3_policy


# -- environment ------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    empty = tmp_path_factory.mktemp("awsconfig")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL_SSM",
                 "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    # The credential chain would otherwise ask the instance metadata service (169.254.169.254).
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _loopback_only(monkeypatch)


def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and not _is_loopback(host):
            raise AssertionError(f"test tried to open a network connection to {address}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> ApiRecorder:
    recorder = ApiRecorder()
    real = botocore.client.BaseClient._make_api_call

    def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        canned = recorder.handle(client, operation, params)
        return canned if canned is not None else real(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", make_api_call)
    return recorder


@pytest.fixture
def aws(aws_env: None, api: ApiRecorder, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiRecorder]:
    """A fresh moto account with the Ubuntu parameter, the default VPC's internet route and the
    permissions boundary seeded; yields the API recorder."""
    trim_moto_amis(monkeypatch)
    share_botocore_loader(monkeypatch)
    with mock_aws():
        seed_ubuntu_parameter()
        seed_default_vpc_internet_route()
        create_image_with_snapshot_tags(monkeypatch)
        profile_on_every_instance_of_a_launch(monkeypatch)
        seed_boundary(api)
        moto_s3_policy.patch(monkeypatch.setattr)
        yield api


def seed_boundary(api: ApiRecorder) -> None:
    """The account's permissions boundary, which an administrator creates once and `up` requires;
    made before the test starts, so its call is not one of the test's."""
    seen = len(api.calls)
    boto3.client("iam", region_name=REGION).create_policy(
        PolicyName=BOUNDARY_NAME, PolicyDocument=json.dumps(boundary_document(DEFAULT_ACCOUNT_ID)))
    del api.calls[seen:]


@pytest.fixture
def ec2(aws: ApiRecorder) -> Any:
    """A plain client for assertions (its calls are recorded too; use `api.clear()` as needed)."""
    return boto3.client("ec2", region_name=REGION)


@pytest.fixture
def events() -> list[str]:
    return []


@pytest.fixture
def make_provider(aws: ApiRecorder, events: list[str]) -> Callable[..., AwsProvider]:
    def make(region: str = REGION, profile: str | None = None,
             caller_ip: Callable[[], str] | None = None) -> AwsProvider:
        provider = AwsProvider(region, profile=profile, events=events.append,
                               caller_ip=caller_ip or (lambda: CALLER_IP))
        provider.instance_wait = {"Delay": 0, "MaxAttempts": 3}
        provider.image_wait = {"Delay": 0, "MaxAttempts": 3}
        provider.sleep = lambda seconds: None
        return provider
    return make


@pytest.fixture
def provider(make_provider: Callable[..., AwsProvider]) -> AwsProvider:
    return make_provider()


@pytest.fixture
def cluster() -> ClusterConfig:
    return cluster_config()


# -- the CLI under moto -----------------------------------------------------------------------
@dataclass
class CliRun:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()

    @property
    def error(self) -> str:
        """The one-line error the CLI printed last."""
        return self.err_lines[-1] if self.err_lines else ""


@dataclass
class CliHarness:
    """Runs `xeoncluster ARGS` through the real `xeoncluster.cli.main` (exit codes, one-line errors)
    with the AWS provider under moto and the SSH seam replaced by a RecordingShell."""

    shell: ShellLog
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch
    caller_ip: Callable[[], str] = lambda: CALLER_IP
    providers: list[AwsProvider] = field(default_factory=list)
    patch_provider: Callable[[AwsProvider], None] | None = None

    def provider_factory(self, config: ClusterConfig, events: Callable[[str], None]) -> AwsProvider:
        provider = AwsProvider(config.aws.region or REGION, profile=config.aws.profile, events=events,
                               caller_ip=self.caller_ip)
        provider.instance_wait = {"Delay": 0, "MaxAttempts": 3}
        provider.image_wait = {"Delay": 0, "MaxAttempts": 3}
        provider.sleep = lambda seconds: None
        if self.patch_provider is not None:
            self.patch_provider(provider)
        self.providers.append(provider)
        return provider

    def __call__(self, *argv: str) -> CliRun:
        import xeoncluster.cli as cli_module

        obj = {"provider_factory": self.provider_factory, "shell_factory": self.shell.factory}
        self.capsys.readouterr()
        try:
            cli_module.main(list(argv), obj=obj)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = self.capsys.readouterr()
        return CliRun(code, captured.out, captured.err)


@pytest.fixture
def shell() -> ShellLog:
    return ShellLog()


@pytest.fixture
def xc(aws: ApiRecorder, shell: ShellLog, xc_home: Any, capsys: pytest.CaptureFixture[str],
       monkeypatch: pytest.MonkeyPatch) -> CliHarness:
    write_config()
    return CliHarness(shell, capsys, monkeypatch)
