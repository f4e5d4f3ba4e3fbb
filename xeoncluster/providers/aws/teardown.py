"""Teardown by tag: everything tagged with the cluster, found without any local state."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.aws.clients import chunks, cluster_filter, error_code, error_text, paginate, translated
from xeoncluster.providers.aws.instances import LIVE_STATES
from xeoncluster.providers.aws.network import describe_placement_groups
from xeoncluster.providers.aws.owner import refuse_if_others
from xeoncluster.providers.aws.role import delete_master_role
from xeoncluster.providers.base import Removed
from xeoncluster.providers.node_kinds import NodeState

# Seconds between delete_security_group attempts while ENIs of terminated instances detach.
SG_BACKOFF = (2, 4, 8, 15, 30, 30, 30)


def remove_all(ec2: Any, iam: Any, cluster: str, region: str, owner: str, wait: dict[str, int],
               sleep: Callable[[float], None], events: Callable[[str], None]) -> Removed:
    """Everything tagged with the cluster and `owner`, and its master's role; idempotent. What carries
    the cluster's name but another owner is not touched: a colleague who tags an instance with our
    cluster's name must not make our `down` fail, nor have theirs removed by it."""
    found = cluster_filter(cluster, owner)
    instance_ids, linked = find_instance_ids(ec2, found)
    # Cancel first so that no request launches a replacement while we terminate.
    spot = cancel_spot_requests(ec2, found, linked)
    if instance_ids:
        terminate_instances(ec2, instance_ids, wait)
    groups = delete_security_groups(ec2, found, sleep, events)
    keys = delete_key_pairs(ec2, found)
    placement = delete_placement_groups(ec2, found, events)
    roles = delete_master_role(iam, cluster, region, owner)
    if not (instance_ids or spot or groups or keys or placement or roles):
        refuse_if_others(ec2, cluster, owner)
    return Removed({"instances": instance_ids, "spot_requests": spot, "security_group": groups,
                    "key_pair": keys, "placement_group": placement, "role": roles})


def find_instance_ids(ec2: Any, found: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(ids to terminate, spot request ids they came from) in any state but terminated."""
    reservations = paginate(ec2, "describe_instances", "Reservations", Filters=[
        *found, {"Name": "instance-state-name", "Values": [*LIVE_STATES, NodeState.SHUTTING_DOWN.value]}])
    instances = [i for r in reservations for i in r.get("Instances", [])]
    return ([i["InstanceId"] for i in instances],
            [i["SpotInstanceRequestId"] for i in instances if i.get("SpotInstanceRequestId")])


def cancel_spot_requests(ec2: Any, found: list[dict[str, Any]], linked: list[str]) -> list[str]:
    tagged = paginate(ec2, "describe_spot_instance_requests", "SpotInstanceRequests",
                      Filters=[*found, {"Name": "state", "Values": ["open", "active"]}])
    ids = sorted({r["SpotInstanceRequestId"] for r in tagged} | set(linked))
    for batch in chunks(ids, 1000):
        with translated("cancelling spot requests"):
            ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=batch)
    return ids


def terminate_instances(ec2: Any, ids: list[str], wait: dict[str, int]) -> None:
    for batch in chunks(ids, 1000):
        with translated("terminating instances"):
            ec2.terminate_instances(InstanceIds=batch)
    for batch in chunks(ids, 1000):
        with translated("waiting for instances to terminate"):
            ec2.get_waiter("instance_terminated").wait(InstanceIds=batch, WaiterConfig=wait)


def terminate_if_present(ec2: Any, instance_id: str, wait: dict[str, int]) -> bool:
    """Terminate one instance and wait for it; False when it is already gone (e.g. reclaimed spot)."""
    try:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as exc:
        if error_code(exc) == "InvalidInstanceID.NotFound":
            return False
        raise
    states = [i["State"]["Name"] for r in reservations for i in r["Instances"]]
    if not states or states[0] == NodeState.TERMINATED:
        return False
    ec2.terminate_instances(InstanceIds=[instance_id])
    ec2.get_waiter("instance_terminated").wait(InstanceIds=[instance_id], WaiterConfig=wait)
    return True


def delete_security_groups(ec2: Any, found: list[dict[str, Any]], sleep: Callable[[float], None],
                           events: Callable[[str], None]) -> list[str]:
    groups = ec2.describe_security_groups(Filters=found)["SecurityGroups"]
    deleted = []
    for group in groups:
        _delete_group_with_backoff(ec2, group["GroupId"], sleep, events)
        deleted.append(group["GroupId"])
    return deleted


def _delete_group_with_backoff(ec2: Any, group_id: str, sleep: Callable[[float], None],
                               events: Callable[[str], None]) -> None:
    for delay in (*SG_BACKOFF, None):
        try:
            ec2.delete_security_group(GroupId=group_id)
            return
        except ClientError as exc:
            code = error_code(exc)
            if code == "InvalidGroup.NotFound":
                return
            if code != "DependencyViolation" or delay is None:
                raise ProviderError(f"deleting security group {group_id}: {error_text(exc)}",
                                    hint="the group is still in use; run down again in a minute") from exc
            events(f"security group {group_id} still in use; retrying in {delay}s")
            sleep(delay)


def delete_key_pairs(ec2: Any, found: list[dict[str, Any]]) -> list[str]:
    pairs = ec2.describe_key_pairs(Filters=found)["KeyPairs"]
    for pair in pairs:
        with translated(f"deleting key pair {pair['KeyName']}"):
            ec2.delete_key_pair(KeyName=pair["KeyName"])
    return [p["KeyName"] for p in pairs]


def delete_placement_groups(ec2: Any, found: list[dict[str, Any]], events: Callable[[str], None]) -> list[str]:
    groups = describe_placement_groups(ec2, found)
    if groups is None:
        events("placement groups not checked: this endpoint does not implement DescribePlacementGroups")
        return []
    names = [g["GroupName"] for g in groups if g.get("State") not in ("deleting", "deleted")]
    for name in names:
        try:
            ec2.delete_placement_group(GroupName=name)
        except ClientError as exc:
            if error_code(exc) != "InvalidPlacementGroup.Unknown":
                raise ProviderError(f"deleting placement group {name}: {error_text(exc)}") from exc
    return names
