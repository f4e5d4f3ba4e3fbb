"""Bad input through `xeoncluster up` on AWS: exit 2, one line, no mutating call, no state folder."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

UP = ("up", "--name", "t1")


def nothing(harness, aws, monkeypatch):
    pass


def config(text: str) -> Callable[..., None]:
    return lambda harness, aws, monkeypatch: Path("cluster.yaml").write_text(text)


def no_credentials(harness, aws, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")


def fail(operation: str, code: str) -> Callable[..., None]:
    return lambda harness, aws, monkeypatch: aws.fail(operation, code, times=99)


def quota(value: float) -> Callable[..., None]:
    return lambda harness, aws, monkeypatch: aws.answer(
        "GetServiceQuota", lambda params: {"Quota": {"QuotaCode": params["QuotaCode"], "Value": value}})


def caller_ip_fails(harness, aws, monkeypatch):
    def timeout() -> str:
        raise TimeoutError("timed out")
    harness.caller_ip = timeout


CASES: list[tuple[str, tuple[str, ...], Callable[..., Any], str]] = [
    ("unknown instance type", ("--instance-type", "c7i.huge"), nothing,
     "unknown instance type 'c7i.huge' (did you mean 'c7i.xlarge'?)"),
    ("malformed instance type", ("--instance-type", "c7i"), nothing, "'c7i' is not an instance type"),
    ("arm instance type", ("--instance-type", "c7g.large"), nothing, "instance type 'c7g.large' is arm64, not x86_64"),
    ("type not offered in the zone", ("--instance-type", "c6i.2xlarge"), config("aws:\n  zones: [us-east-1e]\n"),
     "instance type 'c6i.2xlarge' is not offered in us-east-1e; offered in us-east-1a"),
    ("unknown region", ("--region", "xx-fake-9"), nothing, "unknown AWS region 'xx-fake-9'"),
    ("malformed region", ("--region", "mars"), nothing, "region: must be an AWS region such as us-east-1"),
    ("region not enabled", ("--region", "ap-east-1"), nothing, "region 'ap-east-1' is not enabled for this account"),
    ("no Ubuntu SSM parameter", ("--region", "eu-west-1"), nothing,
     "no Ubuntu 24.04 image published in eu-west-1 (SSM parameter /aws/service/canonical/ubuntu/server/24.04/"),
    ("zero nodes", ("--nodes", "0"), nothing, "nodes: must be between 1 and 256 (got 0)"),
    ("too many nodes", ("--nodes", "300"), nothing, "nodes: must be between 1 and 256 (got 300)"),
    ("invalid CIDR", (), config("ssh:\n  cidr: 10.0.0.1/33\n"), "ssh.cidr: must be 'auto' or a network"),
    ("unknown key", (), config("nodez: 3\n"), "unknown key 'nodez' (did you mean 'nodes'?)"),
    ("nonexistent zone", (), config("aws:\n  zones: [us-east-1z]\n"), "zone 'us-east-1z' does not exist in us-east-1"),
    ("nonexistent VPC", (), config("aws:\n  vpc_id: vpc-0123456789abcdef0\n"),
     "vpc_id 'vpc-0123456789abcdef0' does not exist in us-east-1"),
    ("nonexistent image id", ("--image", "ami-0123456789abcdef0"), nothing,
     "image 'ami-0123456789abcdef0' not found in us-east-1"),
    ("malformed image id", ("--image", "ubuntu"), nothing, "image: must be 'auto', 'none', an AMI id"),
    ("missing credentials", (), no_credentials, "no AWS credentials found | hint: run `aws configure`"),
    ("bad profile", ("--profile", "nope"), nothing, "AWS profile 'nope' not found"),
    ("rejected credentials", (), fail("GetCallerIdentity", "InvalidClientTokenId"),
     "AWS rejected the credentials (InvalidClientTokenId"),
    ("no permission to read", (), fail("DescribeInstanceTypes", "UnauthorizedOperation"),
     "AWS denied a read-only check (UnauthorizedOperation"),
    ("spot quota exceeded", ("--nodes", "8", "--instance-type", "c7i.48xlarge"), quota(256),
     "8 x c7i.48xlarge needs 1536 spot vCPUs but the 'All Standard Spot Instance Requests' quota in us-east-1 is 256"),
    ("on-demand quota exceeded", ("--nodes", "4", "--market", "on-demand"), quota(16),
     "needs 32 on-demand vCPUs but the 'Running On-Demand Standard instances' quota in us-east-1 is 16"),
    ("caller IP unknown", (), caller_ip_fails, "could not find your public IP for ssh.cidr=auto (timed out)"),
]


@pytest.mark.parametrize(("args", "setup", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line_and_creates_nothing(xc, aws, xc_home, monkeypatch, args, setup, expected):
    setup(xc, aws, monkeypatch)
    run = xc(*UP, *args)
    assert run.code == 2, run.err
    assert len(run.err_lines) == 1, run.err
    assert run.error.startswith("error: ") and expected in run.error, run.error
    assert "Traceback" not in run.err and run.out == ""
    assert aws.mutating(service=None) == []
    assert list(xc_home.glob("clusters/*")) == []
    assert xc.shell.calls == []


def test_there_are_at_least_fifteen_cases():
    assert len(CASES) >= 15
