"""preflight(): read-only; bad input is a one-line ConfigError and nothing is mutated."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aws_helpers import ApiRecorder, cluster_config

from xeoncluster.core.errors import ConfigError


def quota(value: float) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda params: {"Quota": {"QuotaCode": params["QuotaCode"], "Value": value}}


def setup_nothing(monkeypatch, aws, tmp_path):
    pass


def no_credentials(monkeypatch, aws, tmp_path):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")


def fail(operation: str, code: str):
    return lambda monkeypatch, aws, tmp_path: aws.fail(operation, code, times=99)


def answer(operation: str, reply):
    return lambda monkeypatch, aws, tmp_path: aws.answer(operation, reply)


CASES: list[tuple[str, dict[str, Any], Callable[..., Any], str, dict[str, Any]]] = [
    ("unknown type with suggestion", {"instance_types": ["c7i.huge"]}, setup_nothing,
     "unknown instance type 'c7i.huge' (did you mean 'c7i.xlarge'?)", {}),
    ("unknown type without suggestion", {"instance_types": ["zz9.mega"]}, setup_nothing,
     "unknown instance type 'zz9.mega'", {}),
    ("second type unknown", {"instance_types": ["c7i.2xlarge", "c6i.16xlargee"]}, setup_nothing,
     "unknown instance type 'c6i.16xlargee' (did you mean 'c6i.16xlarge'?)", {}),
    ("arm type", {"instance_types": ["c7g.large"]}, setup_nothing, "is arm64, not x86_64", {}),
    ("type not offered in zone", {"instance_types": ["c6i.2xlarge"], "zones": ["us-east-1e"]}, setup_nothing,
     "instance type 'c6i.2xlarge' is not offered in us-east-1e; offered in us-east-1a", {}),
    ("nonexistent zone", {"zones": ["us-east-1a", "us-east-1z"]}, setup_nothing,
     "zone 'us-east-1z' does not exist in us-east-1", {}),
    ("zone of another region", {"zones": ["us-west-2a"]}, setup_nothing, "zone 'us-west-2a' does not exist", {}),
    ("unknown region", {"region": "xx-fake-9"}, setup_nothing, "unknown AWS region 'xx-fake-9'", {}),
    ("misspelt region", {"region": "us-eats-1"}, setup_nothing, "(did you mean 'us-east-1'?)", {}),
    ("region not enabled", {"region": "ap-east-1"}, setup_nothing, "region 'ap-east-1' is not enabled", {}),
    ("missing credentials", {}, no_credentials, "no AWS credentials found", {}),
    ("bad profile", {}, setup_nothing, "AWS profile 'nope' not found", {"profile": "nope"}),
    ("rejected credentials", {}, fail("GetCallerIdentity", "InvalidClientTokenId"),
     "AWS rejected the credentials (InvalidClientTokenId", {}),
    ("expired token", {}, fail("GetCallerIdentity", "ExpiredToken"), "AWS rejected the credentials (ExpiredToken", {}),
    ("no permission to read", {}, fail("DescribeInstanceTypes", "UnauthorizedOperation"),
     "AWS denied a read-only check (UnauthorizedOperation", {}),
    ("spot quota exceeded", {"nodes": 8, "instance_types": ["c7i.48xlarge"]}, answer("GetServiceQuota", quota(256)),
     "8 x c7i.48xlarge needs 1536 spot vCPUs but the 'All Standard Spot Instance Requests' quota in us-east-1 is 256",
     {}),
    ("on-demand quota exceeded", {"nodes": 4, "market": "on-demand"}, answer("GetServiceQuota", quota(16)),
     "needs 32 on-demand vCPUs but the 'Running On-Demand Standard instances' quota", {}),
    ("master on-demand quota exceeded", {"nodes": 2, "master_market": "on-demand"}, answer("GetServiceQuota", quota(4)),
     "needs 8 on-demand vCPUs", {}),
    ("vpc does not exist", {"vpc_id": "vpc-0123456789abcdef0"}, setup_nothing,
     "vpc_id 'vpc-0123456789abcdef0' does not exist in us-east-1", {}),
    ("image does not exist", {"image": "ami-0123456789abcdef0"}, setup_nothing,
     "image 'ami-0123456789abcdef0' not found in us-east-1", {}),
    ("no base image in region", {"region": "eu-west-1"}, setup_nothing,
     "no Ubuntu 24.04 image published in eu-west-1", {}),
    ("caller ip lookup fails", {}, setup_nothing, "could not find your public IP for ssh.cidr=auto (timed out)",
     {"caller_ip": "timeout"}),
    ("caller ip garbage", {}, setup_nothing, "could not find your public IP", {"caller_ip": "<html>"}),
    ("caller ip loopback", {}, setup_nothing, "found 127.0.0.1, which is not a public address",
     {"caller_ip": "127.0.0.1"}),
]


def caller_ip_for(value: str | None):
    if value is None:
        return None
    if value == "timeout":
        def raise_timeout() -> str:
            raise TimeoutError("timed out")
        return raise_timeout
    return lambda: value


@pytest.mark.parametrize(("overrides", "setup", "expected", "extra"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_a_config_error_and_mutates_nothing(make_provider, aws: ApiRecorder, monkeypatch, tmp_path,
                                                         overrides, setup, expected, extra):
    setup(monkeypatch, aws, tmp_path)
    cluster = cluster_config(**overrides)
    provider = make_provider(region=cluster.aws.region, profile=extra.get("profile"),
                             caller_ip=caller_ip_for(extra.get("caller_ip")))
    with pytest.raises(ConfigError) as caught:
        provider.preflight(cluster)
    error = caught.value
    assert expected in error.message
    assert "\n" not in error.one_line() and error.exit_code == 2
    assert aws.mutating(service=None) == []
    assert [c for c in provider.calls if c.mutating] == []


def test_there_are_at_least_fifteen_cases():
    assert len(CASES) >= 15


def test_credentials_hint(make_provider, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    with pytest.raises(ConfigError) as caught:
        make_provider().preflight(cluster_config())
    hint = caught.value.hint
    assert "aws configure" in hint and "--profile" in hint and "AWS_PROFILE" in hint


def test_good_config_returns_notes(make_provider, aws):
    notes = make_provider().preflight(cluster_config(nodes=4))
    assert "SSH allowed only from 203.0.113.7/32" in notes
    assert any("quota" in n and "not checked" in n for n in notes)  # moto has no EC2 quotas
    assert aws.mutating(service=None) == []


def test_quota_within_limits_and_world_open_warning(make_provider, aws):
    aws.answer("GetServiceQuota", quota(1024))
    notes = make_provider().preflight(cluster_config(nodes=4, ssh={"cidr": "0.0.0.0/0"}))
    assert "spot vCPUs: 32 of a 1024 quota (running instances not counted)" in notes
    assert "warning: ssh.cidr 0.0.0.0/0 opens SSH to the whole internet" in notes
    quota_calls = [p for svc, op, p in aws.calls if op == "GetServiceQuota"]
    assert [(p["ServiceCode"], p["QuotaCode"]) for p in quota_calls] == [("ec2", "L-34B43A08")]


def test_named_profile_is_used(make_provider, aws, monkeypatch, tmp_path):
    credentials = tmp_path / "credentials"
    credentials.write_text("[dev]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert make_provider(profile="dev").preflight(cluster_config())


def test_caller_ip_is_asked_once(make_provider):
    asked = []
    provider = make_provider(caller_ip=lambda: asked.append(1) or "198.51.100.4")
    provider.preflight(cluster_config())
    provider.prepare(cluster_config(),
                     "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnQnGWTWnV6y0vkNEzYqo9bZ3y0D4xGxKDc9uK3mVb0")
    assert asked == [1]
