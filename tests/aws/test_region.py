"""Where the region comes from: --region, then cluster.yaml, then AWS_REGION, then AWS_DEFAULT_REGION or
the profile's region (boto3's chain), then us-east-1."""
from __future__ import annotations

from pathlib import Path

from aws_helpers import UBUNTU_AMI

PLAN = ("plan", "--nodes", "1", "--image", UBUNTU_AMI)


def planned_region(xc, *extra: str) -> str:
    run = xc(*PLAN, *extra)
    assert run.code == 0, run.err
    return run.out.splitlines()[0].rsplit(" in ", 1)[1]


def test_aws_region_is_honoured(xc, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert planned_region(xc) == "eu-west-1"


def test_the_profiles_region_is_honoured(xc, monkeypatch, tmp_path):
    config = tmp_path / "aws-config"
    config.write_text("[profile work]\nregion = eu-central-1\n")
    credentials = tmp_path / "aws-credentials"
    credentials.write_text("[work]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert planned_region(xc, "--profile", "work") == "eu-central-1"


def test_the_file_wins_over_the_environment_and_the_flag_over_both(xc, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    Path("cluster.yaml").write_text("aws:\n  region: us-west-2\n")
    assert planned_region(xc) == "us-west-2"
    assert planned_region(xc, "--region", "ap-southeast-2") == "ap-southeast-2"


def test_without_any_setting_it_is_us_east_1(xc, monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert planned_region(xc) == "us-east-1"
