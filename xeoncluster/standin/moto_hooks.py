"""Everything the stand-in adds to moto 5.2, in one place: the base AMI and the Ubuntu SSM
parameter, placement groups, GetConsoleOutput from the real console, the data-plane hooks on
RunInstances/TerminateInstances/CreateImage/DeregisterImage, the instance profile on every instance
of a launch, the fault knobs' errors, and bucket policies with a TLS-only statement evaluated as S3
does (moto_s3_policy.py).

moto is patched at class level (its backends are created on first use); all of the stand-in's
own state lives in the Fleet and PlacementGroups objects that the patches close over."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from xeoncluster.standin import moto_s3_policy
from xeoncluster.standin.ec2_errors import ACCOUNT
from xeoncluster.standin.ec2_errors import ec2_error as _error
from xeoncluster.standin.faults import Faults
from xeoncluster.standin.fleet import Fleet, Launch
from xeoncluster.standin.placement_groups import PlacementGroups

REGION = "us-east-1"
CANONICAL = "099720109477"
# What EC2 answers when it is unavailable: 503, which botocore's retry modes retry, then give up on.
_UNAVAILABLE = ('<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>Unavailable</Code>'
                "<Message>The service is unavailable. Please try again shortly. (stand-in fault)</Message>"
                "</Error></Errors><RequestID>standin-unavailable</RequestID></Response>")
BASE_IMAGE_PARAMETER = "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"


def base_ami_id(digest: str) -> str:
    return "ami-0" + digest[:16]


def use_only_base_ami(run_dir: Path, ami_id: str) -> None:
    """Must run before moto is imported: moto loads MOTO_AMIS_PATH at import, and with it set it
    also skips its ~1200 per-region "latest" AMIs (slow to build)."""
    record = {"ami_id": ami_id, "state": "available", "public": True, "owner_id": CANONICAL,
              "image_location": f"{CANONICAL}/ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-standin",
              "sriov": "simple", "root_device_type": "ebs", "root_device_name": "/dev/sda1",
              "description": "Canonical, Ubuntu, 24.04, amd64 noble image (xeoncluster stand-in: Debian 12 tree)",
              "image_type": "machine", "platform": None, "architecture": "x86_64",
              "name": "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-standin",
              "virtualization_type": "hvm", "hypervisor": "xen"}
    path = run_dir / "amis.json"
    path.write_text(json.dumps([record]))
    os.environ["MOTO_AMIS_PATH"] = str(path)


def seed_ubuntu_parameter(ami_id: str, region: str = REGION) -> None:
    from moto.ssm.models import Parameter, ssm_backends

    backend = ssm_backends[ACCOUNT][region]
    backend._parameters[BASE_IMAGE_PARAMETER].append(Parameter(  # type: ignore[abstract]  # abstract only for CloudFormation; moto builds it so too
        account_id=ACCOUNT, name=BASE_IMAGE_PARAMETER, value=ami_id, parameter_type="String",
        description=None, allowed_pattern=None, keyid=None, last_modified_date=datetime.now(UTC), version=1,
        data_type="aws:ec2:image"))


def seed_default_vpc_internet_route(region: str = REGION) -> None:
    """A real default VPC routes 0.0.0.0/0 to an internet gateway; moto's has none. (Inside the
    stand-in nothing leaves the namespace anyway: the route is what the CLI's preflight checks.)"""
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[ACCOUNT][region]
    vpc = next(v for v in backend.vpcs.values() if v.is_default)
    igw = backend.create_internet_gateway()
    backend.attach_internet_gateway(igw.id, vpc.id)
    main = next(t for t in backend.route_tables.values() if t.vpc_id == vpc.id and t.main_association_id)
    backend.create_route(main.id, "0.0.0.0/0", gateway_id=igw.id)


# -- moto's view, as the fleet changes it -----------------------------------------------------------
class MotoState:
    """Implements fleet.MotoView on moto's model objects."""

    CODES: ClassVar[dict[str, int]] = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48,
                                       "stopping": 64, "stopped": 80}

    def set_state(self, instance: Any, name: str) -> None:
        from moto.ec2.models.instances import InstanceState

        instance._state = InstanceState(name, self.CODES[name])

    def set_terminated(self, instance: Any, reason: tuple[str, str] | None) -> None:
        """reason None: TerminateInstances already ran moto's terminate; else EC2 itself ended it."""
        from moto.ec2.models.instances import StateReason

        if reason is None:
            self.set_state(instance, "terminated")
            return
        if instance.state not in ("terminated", "shutting-down"):
            instance.terminate()
        self.set_state(instance, "terminated")
        code, message = reason
        instance._reason = f"{message} ({datetime.now(UTC):%Y-%m-%d %H:%M:%S} GMT)"
        instance.state_reason = StateReason(message, code)

    def set_stopped(self, instance: Any, reason: tuple[str, str]) -> None:
        from moto.ec2.models.instances import StateReason

        instance.stop()
        code, message = reason
        instance._reason = f"{message} ({datetime.now(UTC):%Y-%m-%d %H:%M:%S} GMT)"
        instance.state_reason = StateReason(message, code)

    def set_image_state(self, ami: Any, name: str) -> None:
        ami.state = name


# -- installing the patches -------------------------------------------------------------------------
@dataclass
class Hooks:
    fleet: Fleet
    faults: Callable[[], Faults]
    placement: PlacementGroups = field(default_factory=PlacementGroups)
    images_created: dict[str, float] = field(default_factory=dict)
    snapshots_released: dict[str, float] = field(default_factory=dict)
    snapshots_baking: dict[str, tuple[Any, float]] = field(default_factory=dict)  # snapshot -> (AMI, started)
    # Refusals per capacity rule, for the Faults object they were counted under: new knobs start afresh.
    capacity_refused: tuple[int, dict[int, int]] = (0, {})

    def refuse_capacity(self, zone: str | None, instance_type: str | None) -> bool:
        faults = self.faults()
        generation, refused = self.capacity_refused
        if generation != id(faults):
            refused = {}
            self.capacity_refused = (id(faults), refused)
        rule = faults.capacity_rule(zone, instance_type, refused)
        if rule is not None:
            refused[rule] = refused.get(rule, 0) + 1
        return rule is not None

    def install(self) -> None:
        self._patch_responses()
        self._patch_instances()
        self._patch_images()
        self._patch_snapshot_progress()
        self._patch_security_groups()
        moto_s3_policy.patch()  # the run bucket's TLS-only policy, which moto would apply to every request

    def _patch_responses(self) -> None:
        from moto.core.responses import ActionResult
        from moto.ec2.responses import EC2Response
        from moto.ec2.utils import Base64EncodedString

        hooks = self
        real_describe_instances = EC2Response.describe_instances

        def get_console_output(resp: Any) -> Any:
            instance = resp.ec2_backend.get_instance(resp._get_param("InstanceId"))
            text = hooks.fleet.console(instance.id, latest=resp._get_bool_param("Latest", False))
            return ActionResult({"InstanceId": instance.id, "Timestamp": datetime.now(UTC),
                                 "Output": Base64EncodedString.from_raw_string(text)})

        def create_placement_group(resp: Any) -> Any:
            tags = resp._parse_tag_specification().get("placement-group", {})
            group = hooks.placement.create(resp.region, resp._get_param("GroupName"),
                                           resp._get_param("Strategy", "cluster"), tags)
            return ActionResult({"PlacementGroup": group})

        def delete_placement_group(resp: Any) -> Any:
            hooks.placement.delete(resp.region, resp._get_param("GroupName"))
            return ActionResult({})

        def describe_instances(resp: Any) -> Any:
            if time.time() < hooks.faults().describe_instances_failing_until:
                return _UNAVAILABLE, {"status": 503}
            return real_describe_instances(resp)

        def describe_placement_groups(resp: Any) -> Any:
            groups = hooks.placement.describe(resp.region, resp._get_param("GroupNames", []),
                                              resp._filters_from_querystring())
            return ActionResult({"PlacementGroups": groups})

        EC2Response.describe_instances = describe_instances  # type: ignore[method-assign, assignment]  # moto is patched at class level
        EC2Response.get_console_output = get_console_output  # type: ignore[method-assign, assignment]  # moto is patched at class level
        EC2Response.create_placement_group = create_placement_group  # type: ignore[attr-defined]  # moto 5.2 has none
        EC2Response.delete_placement_group = delete_placement_group  # type: ignore[attr-defined]  # moto 5.2 has none
        EC2Response.describe_placement_groups = describe_placement_groups  # type: ignore[attr-defined]  # moto 5.2 has none

    def _patch_instances(self) -> None:
        from moto.ec2.models import EC2Backend

        real_run, real_terminate = EC2Backend.run_instances, EC2Backend.terminate_instances
        hooks = self

        def run_instances(backend: Any, image_id: str, count: int, user_data: Any,
                          security_group_names: list[str], **kwargs: Any) -> Any:
            zone, itype = _requested_zone(backend, kwargs), kwargs.get("instance_type")
            if hooks.refuse_capacity(zone, itype):
                raise _error("InsufficientInstanceCapacity",
                             f"We currently do not have sufficient {itype} capacity in the Availability Zone "
                             f"you requested ({zone}). (stand-in fault)")
            reservation = real_run(backend, image_id, count, user_data, security_group_names, **kwargs)
            profile_on_every_instance(backend, reservation, kwargs)
            for instance in reservation.instances:
                hooks.fleet.launch(_launch_of(backend, instance))
            return reservation

        def terminate_instances(backend: Any, instance_ids: list[str]) -> Any:
            # EC2 answers a second TerminateInstances of an instance that is shutting down with its state;
            # moto would terminate it again and fail on its network interface, deleted the first time.
            going = [i for i in backend.get_multi_instances_by_id(instance_ids) if i.state == "shutting-down"]
            rest = [i for i in instance_ids if i not in {g.id for g in going}]
            result = real_terminate(backend, rest) if rest else []
            if result:
                hooks.fleet.terminating([i.id for i, _ in result])
            return [*result, *((instance, instance._state) for instance in going)]

        EC2Backend.run_instances = run_instances  # type: ignore[method-assign, assignment]  # moto is patched at class level
        EC2Backend.terminate_instances = terminate_instances  # type: ignore[method-assign, assignment]  # moto is patched at class level

    def _patch_images(self) -> None:
        from moto.ec2.models import EC2Backend

        real_create, real_describe = EC2Backend.create_image, EC2Backend.describe_images
        real_deregister, real_delete_snapshot = EC2Backend.deregister_image, EC2Backend.delete_snapshot
        hooks = self

        def create_image(backend: Any, instance_id: str, name: str, description: str,
                         tag_specifications: list[dict[str, Any]]) -> Any:
            # moto refuses a "snapshot" TagSpecification; EC2 tags the image's snapshots with it.
            snapshot_tags = {t["Key"]: t["Value"] for s in tag_specifications
                             if s["ResourceType"] == "snapshot" for t in s["Tags"]}
            others = [s for s in tag_specifications if s["ResourceType"] != "snapshot"]
            ami = real_create(backend, instance_id, name, description, others)
            if snapshot_tags and ami.ebs_snapshot is not None:
                backend.create_tags([ami.ebs_snapshot.id], snapshot_tags)
            if ami.ebs_snapshot is not None:
                hooks.snapshots_baking[ami.ebs_snapshot.id] = (ami, time.monotonic())
            hooks.fleet.bake(ami, instance_id)
            hooks.images_created[ami.id] = time.monotonic()  # the not-found window opens with the answer
            return ami

        def describe_images(backend: Any, ami_ids: list[str] | None = None, **kwargs: Any) -> Any:
            window = hooks.faults().ami_not_found_seconds
            for ami_id in ami_ids or []:
                if time.monotonic() - hooks.images_created.get(ami_id, -1e9) < window:
                    raise _error("InvalidAMIID.NotFound", f"The image id '[{ami_id}]' does not exist (stand-in fault)")
            return real_describe(backend, ami_ids=ami_ids, **kwargs)

        def deregister_image(backend: Any, ami_id: str) -> None:
            ami = backend.amis.get(ami_id)
            real_deregister(backend, ami_id)
            if ami is not None and ami.ebs_snapshot is not None:
                hooks.snapshots_released[ami.ebs_snapshot.id] = time.monotonic()
            hooks.fleet.deregistered(ami_id)

        def delete_snapshot(backend: Any, snapshot_id: str) -> Any:
            window = hooks.faults().snapshot_in_use_seconds
            if time.monotonic() - hooks.snapshots_released.get(snapshot_id, -1e9) < window:
                raise _error("InvalidSnapshot.InUse",
                             f"The snapshot {snapshot_id} is currently in use (stand-in fault)")
            return real_delete_snapshot(backend, snapshot_id)

        EC2Backend.create_image = create_image  # type: ignore[method-assign, assignment]  # moto is patched at class level
        EC2Backend.describe_images = describe_images  # type: ignore[method-assign, assignment]  # moto is patched at class level
        EC2Backend.deregister_image = deregister_image  # type: ignore[method-assign, assignment]  # moto is patched at class level
        EC2Backend.delete_snapshot = delete_snapshot  # type: ignore[method-assign, assignment]  # moto is patched at class level

    def _patch_snapshot_progress(self) -> None:
        """EBS reports how far an image's snapshot is ("45%"); moto's are always done. Here it follows
        the latency model: the share of the AMI's time to available that has passed."""
        from moto.ec2.models.elastic_block_store import Snapshot

        hooks = self

        def progress(snapshot: Any) -> str:
            ami, started = hooks.snapshots_baking.get(snapshot.id, (None, 0.0))
            if ami is None or ami.state != "pending":
                return "100%"
            faults = hooks.faults()
            share = (time.monotonic() - started) / max(faults.scaled(faults.ami_seconds), 1e-3)
            return f"{min(99, int(share * 100))}%"

        Snapshot.progress = property(progress)  # type: ignore[assignment, method-assign]  # moto is patched at class level

    def _patch_security_groups(self) -> None:
        from moto.ec2.models import EC2Backend

        real_delete = EC2Backend.delete_security_group
        hooks = self

        def delete_security_group(backend: Any, name: str | None = None, group_id: str | None = None) -> None:
            if hooks.faults().sg_dependency_violation and group_id in hooks.fleet.shutting_down_groups():
                raise _error("DependencyViolation", f"resource {group_id} has a dependent object (stand-in fault)")
            return real_delete(backend, name=name, group_id=group_id)

        EC2Backend.delete_security_group = delete_security_group  # type: ignore[method-assign, assignment]  # moto is patched at class level


def profile_on_every_instance(backend: Any, reservation: Any, kwargs: dict[str, Any]) -> None:
    """EC2 gives every instance of a launch its instance profile; moto 5.2 associates it with the first
    one only (its response does, after the backend returns): the others are associated here."""
    name, arn = kwargs.get("iam_instance_profile_name"), kwargs.get("iam_instance_profile_arn")
    if name or arn:
        for instance in reservation.instances[1:]:
            backend.associate_iam_instance_profile(instance.id, iam_instance_profile_name=name,
                                                   iam_instance_profile_arn=arn)


def _requested_zone(backend: Any, kwargs: dict[str, Any]) -> str | None:
    if kwargs.get("placement"):
        return str(kwargs["placement"])
    subnet_id = kwargs.get("subnet_id") or next(
        (n.get("SubnetId") for n in kwargs.get("nics", []) if n.get("SubnetId")), None)
    if subnet_id:
        try:
            return str(backend.get_subnet(subnet_id).availability_zone)
        except Exception:  # noqa: BLE001 - moto itself reports the bad subnet
            return None
    return None


def _launch_of(backend: Any, instance: Any) -> Launch:
    pair = backend.key_pairs.get(instance.key_name) if instance.key_name else None
    public_key = None
    if pair is not None:
        raw = pair.material_public
        public_key = (raw.decode() if isinstance(raw, bytes) else str(raw)).strip()
    groups = {g.id for g in instance.security_groups or []}
    groups |= {g.id for nic in instance.nics.values() for g in nic.group_set}
    return Launch(instance=instance, instance_id=instance.id, image_id=instance.image_id,
                  private_ip=instance.private_ip, public_ip=instance.public_ip, public_key=public_key,
                  group_ids=tuple(sorted(groups)), shutdown_behavior=instance.instance_initiated_shutdown_behavior)
