"""The AWS provider's declaration: AMI ids, regions, instance types, VPC ids, the login user, the
region default and the interruption source (EC2's instance metadata)."""
from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from xeoncluster.providers.node_kinds import Market
from xeoncluster.providers.spec import ProviderSpec

INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
REGION = re.compile(r"[a-z]{2}(-gov)?-[a-z]+-\d")
VPC_ID = re.compile(r"vpc-[0-9a-f]{8,17}")


def check_region(value: str | None) -> str | None:
    if value is not None and not REGION.fullmatch(value):
        raise ValueError("must be an AWS region such as us-east-1")
    return value


def check_instance_types(value: list[str]) -> list[str]:
    for item in value:
        if not INSTANCE_TYPE.fullmatch(item):
            raise ValueError(f"'{item}' is not an instance type such as c7i.2xlarge")
    return value


def check_vpc_id(value: str | None) -> str | None:
    if value is not None and not VPC_ID.fullmatch(value):
        raise ValueError(f"must match {VPC_ID.pattern}")
    return value


def default_region(profile: str | None) -> str:
    """What the AWS CLI would use: AWS_REGION, then AWS_DEFAULT_REGION or the profile's region, then us-east-1.

    botocore itself reads only AWS_DEFAULT_REGION, so AWS_REGION is looked at here."""
    import botocore.exceptions
    import botocore.session

    if os.environ.get("AWS_REGION"):
        return os.environ["AWS_REGION"]
    try:
        region = botocore.session.Session(profile=profile).get_config_variable("region")
    except botocore.exceptions.BotoCoreError:
        region = None  # a missing profile is reported by the preflight, with its own hint
    return str(region or "us-east-1")


class AwsSettings(BaseModel):
    """The `aws:` section of cluster.yaml: what only EC2 means."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    region: str | None = None
    profile: str | None = None
    instance_types: list[str] = Field(default_factory=lambda: ["c7i.2xlarge"], min_length=1)
    market: Literal["spot", "on-demand"] = "spot"
    master_market: Literal["spot", "on-demand"] | None = None
    on_demand_fallback: bool = False
    zones: list[str] = Field(default_factory=list)
    root_volume_gib: int = Field(default=100, ge=8, le=16384, strict=True)
    placement_group: bool = False
    replace_across_zones: bool = False
    vpc_id: str | None = None

    @field_validator("region")
    @classmethod
    def _region(cls, value: str | None) -> str | None:
        return check_region(value)

    @field_validator("instance_types")
    @classmethod
    def _instance_types(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists an instance type twice")
        return check_instance_types(value)

    @field_validator("vpc_id")
    @classmethod
    def _vpc_id(cls, value: str | None) -> str | None:
        return check_vpc_id(value)

    @property
    def effective_master_market(self) -> Market:
        return Market(self.master_market or self.market)

    @property
    def worker_market(self) -> Market:
        return Market(self.market)


def machine_of(config: AwsSettings) -> tuple[str, str]:
    return config.instance_types[0], config.market


def complete(config: AwsSettings) -> None:
    if config.region is None:
        object.__setattr__(config, "region", default_region(config.profile))


AWS = ProviderSpec(
    name="aws",
    image_id=re.compile(r"ami-[0-9a-f]{8,17}"),
    image_id_text="an AMI id (ami-...)",
    default_user="ubuntu",
    instance_id=re.compile(r"i-[0-9a-f]{8,17}"),
    notices="aws-imds",
    settings=AwsSettings,
    complete=complete,
    # InstanceInitiatedShutdownBehavior=terminate (instances.py): a node's own shutdown terminates it.
    poweroff="sudo -n shutdown -h now",
    up_minutes=15.0,  # a first bake of a 100 GiB root volume, and the nodes' boots
    # The least a replacement from the image takes to be ready (a spot launch and a boot with cloud-init: 20 s on
    # the stand-in, more on EC2; SSH, the run's package and data): with less left a swap cannot come in time. Not
    # more: a 90 s notice seen late under load (CI's) was taken for a short one at 60 s.
    replace_seconds=30.0,
    storage_url=re.compile(r"s3://[^/\s]+(/\S*)?"),
    storage_url_text="s3://BUCKET/PREFIX",
    agent_env=("AWS_ENDPOINT_URL",),
    machine_of=machine_of,
    moved_keys=tuple(AwsSettings.model_fields),
)
