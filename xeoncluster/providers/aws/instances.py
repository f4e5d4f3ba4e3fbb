"""Instances: the run_instances request as a value, capacity fallback, and Node views from tags."""
from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from botocore.exceptions import BotoCoreError, ClientError, WaiterError

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.aws.clients import (
    TAG_INDEX_BASE,
    call_retrying,
    chunks,
    cluster_filter,
    cluster_tags,
    error_code,
    error_text,
    is_capacity_error,
    paginate,
    provider_error,
    tag_specs,
    tags_of,
)
from xeoncluster.providers.aws.spec import AwsSettings
from xeoncluster.providers.base import TAG_OWNER, TAG_ROLE
from xeoncluster.providers.node_kinds import Market, Node, NodeState, Role, by_index

LIVE_STATES = [state.value for state in NodeState if state.is_live()]
INDEX_LIMIT = 10_000  # a node's name has at most four digits (NODE_NAME in xeoncluster/cluster/untrusted.py)
INDEX_TAG = re.compile(r"[0-9]{1,4}")
KMS_HINT = ("if EBS encryption uses a customer-managed default KMS key, allow kms:CreateGrant, kms:Decrypt, "
            "kms:GenerateDataKeyWithoutPlaintext, kms:ReEncrypt* and kms:DescribeKey on it (docs/aws.md)")
CLIENT_DEATH_HINTS = {
    "Client.InternalError": KMS_HINT,
    "Client.VolumeLimitExceeded": "request a higher EBS storage quota, or use fewer nodes or a smaller root_volume_gib",
    "Client.InstanceInitiatedShutdown": "the image shut the node down at boot; check the image "
                                        "(image: in cluster.yaml)",
    "Client.InvalidSnapshot.NotFound": "the image's snapshot is gone; remove the image (`xeoncluster images rm`) "
                                       "to re-bake it",
}


@dataclass(frozen=True)
class Attempt:
    instance_type: str
    zone: str
    market: Market

    def __str__(self) -> str:
        return f"{self.instance_type} {self.market} in {self.zone}"


@dataclass(frozen=True)
class LaunchSpec:
    """Everything about a launch except where and what it lands on (the Attempt)."""

    cluster: str
    role: Role
    count: int
    first_index: int
    image_id: str
    root_device: str
    root_gib: int
    key_name: str
    security_group_id: str
    subnets: dict[str, str]
    placement_group: str | None
    public_ip: bool
    owner: str  # the UserId of who made the cluster (the run agent launches for that user too)
    instance_profile: str | None = None  # the cluster's, on every node: the run agent acts on the cluster with it


@dataclass(frozen=True)
class Launched:
    attempt: Attempt
    instance_ids: tuple[str, ...]
    failures: tuple[str, ...]


def node_name(index: int) -> str:
    return f"node{index}"


def instance_name(spec: LaunchSpec) -> str:
    last = spec.first_index + spec.count - 1
    suffix = node_name(spec.first_index) if spec.count == 1 else f"nodes{spec.first_index}-{last}"
    return f"{spec.cluster}-{suffix}"


def run_request(spec: LaunchSpec, attempt: Attempt, client_token: str) -> dict[str, Any]:
    """The run_instances arguments for one attempt: a value that plan and tests can inspect."""
    # One tag set for all instances keeps launch at one mutating call; each node's name is
    # index-base + AmiLaunchIndex, read back by nodes().
    tags = cluster_tags(spec.cluster, spec.role, spec.owner,
                        **{TAG_INDEX_BASE: str(spec.first_index), "Name": instance_name(spec)})
    kinds = ["instance", "volume"] + (["spot-instances-request"] if attempt.market == Market.SPOT else [])
    request: dict[str, Any] = {
        "ImageId": spec.image_id, "InstanceType": attempt.instance_type,
        "MinCount": spec.count, "MaxCount": spec.count, "KeyName": spec.key_name,
        "ClientToken": client_token,
        "NetworkInterfaces": [{"DeviceIndex": 0, "SubnetId": spec.subnets[attempt.zone],
                               "Groups": [spec.security_group_id], "DeleteOnTermination": True,
                               "AssociatePublicIpAddress": spec.public_ip}],
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1},
        "BlockDeviceMappings": [{"DeviceName": spec.root_device, "Ebs": {
            "VolumeSize": spec.root_gib, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}}],
        "InstanceInitiatedShutdownBehavior": "terminate",
        "TagSpecifications": tag_specs(tags, *kinds),
    }
    if spec.placement_group:
        request["Placement"] = {"GroupName": spec.placement_group}
    if spec.instance_profile:
        request["IamInstanceProfile"] = {"Name": spec.instance_profile}
    if attempt.market == Market.SPOT:
        request["InstanceMarketOptions"] = {"MarketType": Market.SPOT.value, "SpotOptions": {
            "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    return request


def near_zones(zones_by_type: Mapping[str, tuple[str, ...]], near: Node | None,
               same_zone: bool) -> dict[str, list[str]]:
    """Zones to try per type: the `near` node's zone first (DDP traffic stays in one zone), or only it
    when the cluster is bound to that zone (a placement group, or a replacement that keeps it)."""
    wanted = near.zone if near is not None else None
    result = {}
    for itype, zones in zones_by_type.items():
        ordered = sorted(zones, key=lambda z: z != wanted)
        result[itype] = [z for z in ordered if z == wanted] if wanted and same_zone else ordered
    return result


@dataclass(frozen=True)
class KeptZone:
    """A zone a launch may not leave, and why: said with what was tried when it has no capacity."""

    zone: str
    why: str
    hint: str


def kept_zone(near: Node | None, settings: AwsSettings, replacement: bool) -> KeptZone | None:
    if near is None or not near.zone:
        return None
    if settings.placement_group:
        return KeptZone(near.zone, "the zone the cluster's placement group is bound to",
                        "retry later, add instance types, or set aws.placement_group: false")
    if replacement and not settings.replace_across_zones:
        return KeptZone(near.zone, f"{near.name}'s zone, which a replacement keeps (DDP traffic across zones is "
                                   "billed per GB; aws.replace_across_zones: true lets it cross)",
                        "retry later, add instance types, or set aws.replace_across_zones: true")
    return None


def plan_attempts(settings: AwsSettings, zones_by_type: dict[str, list[str]], market: Market,
                  home: str | None = None) -> list[Attempt]:
    """Next zone, then next type, then (spot only, if allowed) the same again on demand. With a `home`
    zone (the master's), every type is tried there before any other zone."""
    markets = [market] + ([Market.ON_DEMAND] if market == Market.SPOT and settings.on_demand_fallback else [])
    attempts = [Attempt(t, z, m) for m in markets for t in settings.instance_types for z in zones_by_type.get(t, [])]
    return sorted(attempts, key=lambda a: (markets.index(a.market), a.zone != home)) if home else attempts


def launch_with_fallback(ec2: Any, spec: LaunchSpec, attempts: list[Attempt], wait: dict[str, int],
                         events: Callable[[str], None], run_client: Any = None,
                         sleep: Callable[[float], None] = time.sleep, kept: KeptZone | None = None) -> Launched:
    """One run_instances per attempt. `run_client` should have botocore retries off (capacity errors
    come as HTTP 500, which botocore would retry in the same zone); throttling is retried here."""
    failures: list[str] = []
    for attempt in attempts:
        try:
            ids = _run_once(ec2, run_client or ec2, spec, attempt, wait, sleep, events)
        except _CapacityFailure as failure:
            failures.append(f"{attempt} ({failure})")
            events(f"{spec.role}: {attempt} unavailable ({failure}); trying the next option")
            continue
        reason = f" after {'; '.join(failures)}" if failures else ""
        events(f"launched {spec.count} {spec.role} node(s) as {attempt}{reason}")
        return Launched(attempt, tuple(ids), tuple(failures))
    tried = "; ".join(failures) if failures else "no zone offers the requested instance types"
    if kept:
        raise ProviderError(f"could not launch {spec.count} {spec.role} node(s) in {kept.zone}, {kept.why}: {tried}",
                            hint=kept.hint)
    hint = "add instance types or zones" + (", or set aws.on_demand_fallback: true"
                                             if attempts and attempts[0].market == Market.SPOT else "")
    raise ProviderError(f"could not launch {spec.count} {spec.role} node(s): {tried}", hint=hint)


class _CapacityFailure(Exception):
    pass


def _run_once(ec2: Any, run_client: Any, spec: LaunchSpec, attempt: Attempt, wait: dict[str, int],
              sleep: Callable[[float], None], events: Callable[[str], None]) -> list[str]:
    # The client token makes retries of this call idempotent: a retry after a lost reply returns the
    # same reservation instead of launching a second fleet.
    request = run_request(spec, attempt, client_token=uuid.uuid4().hex)
    try:
        reply = call_retrying(lambda: run_client.run_instances(**request), sleep,
                              on_retry=lambda why: events(f"{spec.role}: run_instances in {attempt.zone}: {why}"))
    except ClientError as exc:
        if is_capacity_error(exc):
            raise _CapacityFailure(error_text(exc)) from exc
        raise provider_error(f"launching {spec.count} {spec.role} node(s) as {attempt}", exc) from exc
    except BotoCoreError as exc:
        raise provider_error(f"launching {spec.count} {spec.role} node(s) as {attempt}", exc) from exc
    ids = [i["InstanceId"] for i in reply["Instances"]]
    try:
        ec2.get_waiter("instance_running").wait(InstanceIds=ids, WaiterConfig=wait)
    except WaiterError as exc:
        terminate_now(ec2, ids)
        reason = state_reason(exc.last_response or {})
        if reason.code.startswith("Client."):
            raise ProviderError(f"{spec.count} {spec.role} node(s) stopped before running ({attempt}): {reason}",
                                hint=CLIENT_DEATH_HINTS.get(reason.code)) from exc
        raise _CapacityFailure(f"instances did not reach running: {reason}") from exc
    except BaseException:
        terminate_now(ec2, ids)
        raise
    return ids


@dataclass(frozen=True)
class StateReason:
    """Why EC2 stopped an instance: Server.* codes are EC2's side (another zone or type may work),
    Client.* codes are the account's or request's (every attempt would die the same way)."""

    code: str
    message: str

    def __str__(self) -> str:
        if not self.code:
            return self.message
        return self.message if self.message.startswith(self.code) else f"{self.code}: {self.message}".rstrip(": ")


def state_reason(response: dict[str, Any]) -> StateReason:
    for reservation in response.get("Reservations", []):
        for inst in reservation.get("Instances", []):
            if inst.get("State", {}).get("Name") != NodeState.RUNNING:
                raw = inst.get("StateReason", {})
                return StateReason(str(raw.get("Code", "")), str(raw.get("Message") or inst["State"]["Name"]))
    return StateReason("", "unknown")


def terminate_now(ec2: Any, ids: list[str]) -> None:
    """Best effort: the caller is already failing; `terminate` by tag is the safety net."""
    for batch in chunks(ids, 1000):
        with contextlib.suppress(Exception):  # any error here would hide the caller's own
            ec2.terminate_instances(InstanceIds=batch)


def describe_instances(ec2: Any, *, ids: list[str] | None = None, cluster: str | None = None,
                       owner: str | None = None) -> list[dict[str, Any]]:
    filters = [{"Name": "instance-state-name", "Values": LIVE_STATES}]
    if cluster is not None:
        filters += cluster_filter(cluster, owner)
    kwargs: dict[str, Any] = {"Filters": filters}
    if ids is not None:
        kwargs["InstanceIds"] = ids
    reservations = paginate(ec2, "describe_instances", "Reservations", **kwargs)
    return [i for r in reservations for i in r.get("Instances", [])]


def to_nodes(raws: list[dict[str, Any]], address: str, warn: Callable[[str], None]) -> list[Node]:
    """The instances as nodes, in index order. One whose index makes no node name is left out with one
    line: its index-base tag is the master's role's to write, and one instance must not stop a command."""
    nodes = []
    for raw in raws:
        node = to_node(raw, address)
        if node is None:
            base = str(tags_of(raw).get(TAG_INDEX_BASE))
            warn(f"warning: instance {str(raw.get('InstanceId'))[:40]!r} is tagged {TAG_INDEX_BASE}={base[:40]!r} "
                 f"with launch index {str(raw.get('AmiLaunchIndex'))[:20]!r}: no node index below {INDEX_LIMIT}; "
                 "left out")
        else:
            nodes.append(node)
    return by_index(nodes)


def launch_index(raw: dict[str, Any]) -> int | None:
    """index-base tag + AmiLaunchIndex, or None unless both are small non-negative integers."""
    base = tags_of(raw).get(TAG_INDEX_BASE, "0")
    offset = raw.get("AmiLaunchIndex", 0)
    if not INDEX_TAG.fullmatch(base) or type(offset) is not int:
        return None
    index = int(base) + offset
    return index if 0 <= index < INDEX_LIMIT else None


def to_node(raw: dict[str, Any], address: str) -> Node | None:
    """None: an instance whose index makes no node name (launch_index)."""
    tags = tags_of(raw)
    index = launch_index(raw)
    if index is None:
        return None
    private_ip = raw.get("PrivateIpAddress", "")
    public_ip = raw.get("PublicIpAddress")
    return Node(
        name=node_name(index), id=raw["InstanceId"], private_ip=private_ip,
        ssh_host=(public_ip or private_ip) if address == "public" else private_ip,
        role=role_of(tags.get(TAG_ROLE, Role.WORKER)),
        market=Market.SPOT if raw.get("InstanceLifecycle") == Market.SPOT else Market.ON_DEMAND,
        zone=raw.get("Placement", {}).get("AvailabilityZone"), instance_type=raw.get("InstanceType"),
        state=state_of(raw.get("State", {}).get("Name", NodeState.UNKNOWN)), owner=tags.get(TAG_OWNER),
        launched_at=launched_at(raw),
    )


def launched_at(raw: dict[str, Any]) -> float | None:
    launch = raw.get("LaunchTime")
    return launch.timestamp() if isinstance(launch, datetime) else None


def role_of(tag: str) -> Role:
    """The master's role may tag instances with anything: a role outside Role is carried as it was written
    (Node keeps it), so that cluster/untrusted.py refuses the node by name rather than this crashing the listing."""
    return cast(Role, tag)


def state_of(name: str) -> NodeState:
    return NodeState(name) if name in NodeState._value2member_map_ else NodeState.UNKNOWN


SPOT_INTERRUPTION = "Server.SpotInstanceTermination"


def loss_reason(ec2: Any, instance_id: str) -> str:
    """Why an instance stopped running, in EC2's words; a spot interruption is named as such."""
    try:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as exc:
        if error_code(exc) == "InvalidInstanceID.NotFound":
            return "gone (EC2 no longer knows the instance)"
        raise
    instance = reservations[0]["Instances"][0] if reservations and reservations[0]["Instances"] else {}
    state = instance.get("State", {}).get("Name", "gone")
    code = instance.get("StateReason", {}).get("Code", "")
    if code == SPOT_INTERRUPTION:
        return f"spot interruption ({code})"
    return f"{state} ({code})" if code else state
