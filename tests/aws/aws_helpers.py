"""Helpers for AWS tests under moto: constants, the API recorder with fault injection and the
placement-group fake, moto gap fillers, config builder, and what-is-left assertions.
Fixtures that use them live in conftest.py."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.core import DEFAULT_ACCOUNT_ID

from xeoncluster.providers.aws.clients import is_mutating
from xeoncluster.providers.aws.images import BASE_IMAGE_PARAMETER
from xeoncluster.providers.config import ClusterConfig

REGION = "us-east-1"
CALLER_IP = "203.0.113.7"
# moto's Canonical-owned Ubuntu AMI (x86_64, root /dev/sda1) stands in for Ubuntu 24.04.
UBUNTU_AMI = "ami-785db401"
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnQnGWTWnV6y0vkNEzYqo9bZ3y0D4xGxKDc9uK3mVb0 test@xc"


# -- API recorder and fault injection -----------------------------------------------------------
@dataclass
class Fault:
    operation: str
    error: BaseException | str
    occurrence: int = 1  # fail the n-th call of this operation (1-based) ...
    times: int = 1  # ... and this many after it
    when: Callable[[dict[str, Any]], bool] | None = None
    seen: int = 0
    fired: int = 0

    def should_fire(self, params: dict[str, Any]) -> bool:
        if self.when is not None and not self.when(params):
            return False
        self.seen += 1
        if self.seen >= self.occurrence and self.fired < self.times:
            self.fired += 1
            return True
        return False

    def exception(self) -> BaseException:
        if isinstance(self.error, BaseException):
            return self.error
        return ClientError({"Error": {"Code": self.error, "Message": f"injected {self.error}"}}, self.operation)


@dataclass
class ApiRecorder:
    """Wraps BaseClient._make_api_call: every boto3 client in the process is recorded."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    placement_groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    canned: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)

    def fail(self, operation: str, error: BaseException | str = "InternalFailure", occurrence: int = 1,
             times: int = 1, when: Callable[[dict[str, Any]], bool] | None = None) -> Fault:
        fault = Fault(operation, error, occurrence, times, when)
        self.faults.append(fault)
        return fault

    def answer(self, operation: str, reply: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Answer `operation` with reply(params) instead of moto (for APIs moto lacks)."""
        self.canned[operation] = reply

    def ops(self, service: str | None = "ec2") -> list[str]:
        return [op for svc, op, _ in self.calls if service is None or svc == service]

    def mutating(self, service: str | None = "ec2") -> list[str]:
        return [op for op in self.ops(service) if is_mutating(op)]

    def clear(self) -> None:
        self.calls.clear()

    def handle(self, client: Any, operation: str, params: dict[str, Any]) -> dict[str, Any] | None:
        service = client.meta.service_model.service_name
        self.calls.append((service, operation, dict(params)))
        for fault in self.faults:
            if fault.operation == operation and fault.should_fire(params):
                raise fault.exception()
        if operation in self.canned:
            return self.canned[operation](params)
        if service == "ec2" and operation.endswith(("PlacementGroup", "PlacementGroups")):
            return self._placement_group(operation, params)
        return None

    def _placement_group(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        if operation == "CreatePlacementGroup":
            name = params["GroupName"]
            if name in self.placement_groups:
                raise ClientError({"Error": {"Code": "InvalidPlacementGroup.Duplicate", "Message": name}}, operation)
            tags = [t for spec in params.get("TagSpecifications", []) for t in spec["Tags"]]
            self.placement_groups[name] = {"GroupName": name, "Strategy": params.get("Strategy"),
                                           "State": "available", "GroupId": f"pg-{len(self.placement_groups):017x}",
                                           "Tags": tags}
            return {"PlacementGroup": self.placement_groups[name]}
        if operation == "DeletePlacementGroup":
            if self.placement_groups.pop(params["GroupName"], None) is None:
                raise ClientError({"Error": {"Code": "InvalidPlacementGroup.Unknown", "Message": "no"}}, operation)
            return {}
        groups = list(self.placement_groups.values())
        for flt in params.get("Filters", []):
            groups = [g for g in groups if _matches(g, flt)]
        return {"PlacementGroups": groups}


def _matches(group: dict[str, Any], flt: dict[str, Any]) -> bool:
    name, values = flt["Name"], flt["Values"]
    if name == "group-name":
        return group["GroupName"] in values
    if name.startswith("tag:"):
        return any(t["Key"] == name[4:] and t["Value"] in values for t in group["Tags"])
    raise NotImplementedError(name)


# -- moto gaps ------------------------------------------------------------------------------------
def seed_ubuntu_parameter(region: str = REGION, ami: str = UBUNTU_AMI) -> None:
    from moto.ssm.models import Parameter, ssm_backends

    backend = ssm_backends[DEFAULT_ACCOUNT_ID][region]
    backend._parameters[BASE_IMAGE_PARAMETER].append(Parameter(
        account_id=DEFAULT_ACCOUNT_ID, name=BASE_IMAGE_PARAMETER, value=ami, parameter_type="String",
        description=None, allowed_pattern=None, keyid=None, last_modified_date=1.7e9, version=1,
        data_type="aws:ec2:image"))


def seed_default_vpc_internet_route(region: str = REGION) -> str:
    """moto's default VPC has no internet gateway, so its subnets have no default route; a real
    default VPC routes 0.0.0.0/0 to one. Added in the backend so that no test sees the calls."""
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    vpc = next(v for v in backend.vpcs.values() if v.is_default)
    igw = backend.create_internet_gateway()
    backend.attach_internet_gateway(igw.id, vpc.id)
    main = next(t for t in backend.route_tables.values() if t.vpc_id == vpc.id and t.main_association_id)
    backend.create_route(main.id, "0.0.0.0/0", gateway_id=igw.id)
    return str(igw.id)


def trim_moto_amis(monkeypatch: pytest.MonkeyPatch, keep: tuple[str, ...] = (UBUNTU_AMI,)) -> None:
    """Speed only: moto builds ~1200 AMIs every time it creates or resets a region backend
    (~0.2 s each, several per test). Keep the few AMIs the tests use; MOTO_AMIS_PATH being set
    makes moto skip its per-region "latest" AMIs (the path itself was read at import, if ever)."""
    from moto.ec2.models import amis

    monkeypatch.setattr(amis, "AMIS", [a for a in amis.AMIS if a["ami_id"] in keep])
    monkeypatch.setenv("MOTO_AMIS_PATH", "trimmed-by-tests")


_SHARED_LOADERS: dict[Any, Any] = {}


def share_botocore_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Speed only: every provider makes its own boto3 Session, and each session would parse the
    large EC2 service model again (~0.3 s). Tests share one data loader (read-only JSON cache)."""
    import botocore.loaders
    import botocore.session

    def create_loader(search_path_string: Any = None) -> Any:
        if search_path_string not in _SHARED_LOADERS:
            _SHARED_LOADERS[search_path_string] = botocore.loaders.create_loader(search_path_string)
        return _SHARED_LOADERS[search_path_string]

    monkeypatch.setattr(botocore.session, "create_loader", create_loader)


def create_image_with_snapshot_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.ec2.models.amis import AmiBackend

    real = AmiBackend.create_image

    def create_image(self: Any, instance_id: str, name: str, description: str,
                     tag_specifications: list[dict[str, Any]]) -> Any:
        snapshot_tags = [t for s in tag_specifications if s["ResourceType"] == "snapshot" for t in s["Tags"]]
        others = [s for s in tag_specifications if s["ResourceType"] != "snapshot"]
        ami = real(self, instance_id, name, description, others)
        if snapshot_tags:
            self.create_tags([ami.ebs_snapshot.id], {t["Key"]: t["Value"] for t in snapshot_tags})
        return ami

    monkeypatch.setattr(AmiBackend, "create_image", create_image)


def profile_on_every_instance_of_a_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """As EC2 does, and as the stand-in makes moto do (moto alone: the first instance only)."""
    from moto.ec2.models import EC2Backend

    from xeoncluster.standin.moto_hooks import profile_on_every_instance

    real = EC2Backend.run_instances

    def run_instances(self: Any, image_id: str, count: int, user_data: Any, security_group_names: list[str],
                      **kwargs: Any) -> Any:
        reservation = real(self, image_id, count, user_data, security_group_names, **kwargs)
        profile_on_every_instance(self, reservation, kwargs)
        return reservation

    monkeypatch.setattr(EC2Backend, "run_instances", run_instances)


# These tests follow the published flow (configure the master, bake, workers from the image); the
# default, image_strategy: parallel, has its own tests that say so.
BAKE_FIRST = "image_strategy: bake-first\n"


def write_config(text: str = "") -> None:
    """./cluster.yaml for the CLI under test (xc_home chdirs into the test's tmp_path)."""
    Path("cluster.yaml").write_text(BAKE_FIRST + text)


def cluster_config(**overrides: Any) -> ClusterConfig:
    base: dict[str, Any] = {"name": "t1", "provider": "aws", "region": REGION, "nodes": 4,
                            "instance_types": ["c7i.2xlarge"], "ssh": {"cidr": "auto"},
                            "image_strategy": "bake-first"}
    base.update(overrides)
    return ClusterConfig.model_validate(base)


def live_state(ec2: Any, name: str) -> dict[str, list[str]]:
    """What moto still holds for a cluster, by kind (empty lists mean nothing is left)."""
    tag = [{"Name": "tag:xeoncluster:cluster", "Values": [name]}]
    reservations = ec2.describe_instances(Filters=tag)["Reservations"]
    instances = [i["InstanceId"] for r in reservations for i in r["Instances"] if i["State"]["Name"] != "terminated"]
    groups = [g["GroupId"] for g in ec2.describe_security_groups(Filters=tag)["SecurityGroups"]]
    groups += [g["GroupId"] for g in ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [f"xeoncluster-{name}"]}])["SecurityGroups"]]
    keys = [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"] if k["KeyName"] == f"xeoncluster-{name}"]
    spot = [r["SpotInstanceRequestId"] for r in ec2.describe_spot_instance_requests(Filters=tag)["SpotInstanceRequests"]
            if r["State"] in ("open", "active")]
    return {"instances": instances, "security_groups": sorted(set(groups)), "key_pairs": keys, "spot_requests": spot}


def nothing_left(state: dict[str, list[str]]) -> bool:
    return not any(state.values())



def seed_cached_image(ec2: Any, key: str, baked_by: str = "seed", owner: str | None = None) -> str:
    """An AMI tagged with `key`, as an earlier `up` (of another cluster) of `owner` (default: the caller)
    would have baked it."""
    import boto3

    from xeoncluster.providers.base import TAG_CLUSTER, TAG_IMAGE_KEY, TAG_OWNER

    instance = ec2.run_instances(ImageId=UBUNTU_AMI, MinCount=1, MaxCount=1, InstanceType="c7i.2xlarge")
    instance_id = instance["Instances"][0]["InstanceId"]
    owner = owner if owner is not None else boto3.client("sts", region_name=REGION).get_caller_identity()["UserId"]
    tags = [{"Key": TAG_IMAGE_KEY, "Value": key}, {"Key": TAG_CLUSTER, "Value": baked_by},
            {"Key": TAG_OWNER, "Value": owner}]
    image = ec2.create_image(InstanceId=instance_id, Name=f"xeoncluster-{key[:16]}-{baked_by}",
                             TagSpecifications=[{"ResourceType": "image", "Tags": tags}])
    ec2.terminate_instances(InstanceIds=[instance_id])
    return str(image["ImageId"])


def stock_image_key(base: str = UBUNTU_AMI, stack: str = "stock") -> str:
    from xeoncluster.cluster.image import image_key
    from xeoncluster.core.stacks import get_stack

    return image_key(base, get_stack(stack))


def own_images(ec2: Any, cluster: str | None = None) -> list[dict[str, Any]]:
    filters = [{"Name": "tag:xeoncluster:cluster", "Values": [cluster]}] if cluster else []
    return list(ec2.describe_images(Owners=["self"], Filters=filters)["Images"])


def instances(ec2: Any, name: str = "t1") -> list[dict[str, Any]]:
    """The cluster's instances that are not terminated, from EC2 (moto)."""
    from xeoncluster.providers.base import TAG_CLUSTER

    found = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [name]}])["Reservations"]
    return [i for r in found for i in r["Instances"] if i["State"]["Name"] != "terminated"]
