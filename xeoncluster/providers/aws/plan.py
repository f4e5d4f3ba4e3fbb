"""What `plan` asks of AWS, read-only: what `up` would create or reuse, notes on capacity and
fallbacks, and the topology of an instance type from the catalog."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.aws import catalog as aws_catalog
from xeoncluster.providers.aws import network as aws_network
from xeoncluster.providers.aws import role as aws_role
from xeoncluster.providers.aws.clients import error_code
from xeoncluster.providers.aws.spec import AwsSettings
from xeoncluster.providers.base import PlannedResource
from xeoncluster.providers.node_kinds import Market
from xeoncluster.topology import CpuTopology

if TYPE_CHECKING:
    from xeoncluster.providers.config import ClusterConfig


def plan_notes(cluster: ClusterConfig) -> tuple[str, ...]:
    aws = cluster.section(AwsSettings)
    notes = tuple(f"fallback instance type: {t}" for t in aws.instance_types[1:])
    if aws.worker_market == Market.SPOT:
        notes += ("spot falls back to on-demand when no capacity" if aws.on_demand_fallback
                  else "spot only: set aws.on_demand_fallback: true to fall back to on-demand",)
    return notes


def machine_topology(instance_type: str) -> CpuTopology:
    kind = aws_catalog.lookup(instance_type)
    if kind is None:
        hint = aws_catalog.nearest(instance_type)
        raise ConfigError(f"unknown instance type '{instance_type}'" + (f" (did you mean '{hint}'?)" if hint else ""))
    return aws_catalog.topology_of(kind)


def planned_resources(ec2: Any, iam: Any, cluster: ClusterConfig, ssh_cidr: str, region: str) -> list[PlannedResource]:
    name = aws_network.resource_name(cluster.name)
    vpc_id = aws_network.resolve_vpc(ec2, cluster.section(AwsSettings).vpc_id)
    has_key = bool(ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [name]}])["KeyPairs"])
    has_group = aws_network.find_security_group(ec2, cluster.name, vpc_id) is not None
    rules = f"all traffic from itself; tcp/22 from {ssh_cidr}"
    resources = [
        PlannedResource("key_pair", name, "reuse" if has_key else "create"),
        PlannedResource("security_group", name, "reuse" if has_group else "create", f"{vpc_id}: {rules}"),
    ]
    if cluster.section(AwsSettings).placement_group:
        found = aws_network.describe_placement_groups(ec2, [{"Name": "group-name", "Values": [name]}])
        unchecked = "; not checked (DescribePlacementGroups not implemented here)" if found is None else ""
        resources.append(PlannedResource("placement_group", name, "reuse" if found else "create",
                                         f"strategy cluster{unchecked}"))
    return [*resources, _planned_role(iam, cluster, region)]


def _planned_role(iam: Any, cluster: ClusterConfig, region: str) -> PlannedResource:
    role = aws_role.role_name(cluster.name, region)
    try:
        iam.get_role(RoleName=role)
        action = "reuse"
    except ClientError as exc:
        if error_code(exc) != "NoSuchEntity":
            raise
        action = "create"
    return PlannedResource("role", role, action, "every node's, for the run agent: launch and terminate this "
                                                 "cluster's instances only, under the permissions boundary "
                                                 "(+ instance profile)")
