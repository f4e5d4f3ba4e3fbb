"""`prepare` for AWS: a pipeline of small named steps, each configuring one thing the cluster owns
(key pair, security group, placement group), then the network launches need. Idempotent."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.aws import network as aws_network
from xeoncluster.providers.aws.spec import AwsSettings
from xeoncluster.providers.base import Network, Prepared

if TYPE_CHECKING:
    from xeoncluster.providers.config import ClusterConfig

Events = Callable[[str], None]


def prepare(ec2: Any, cluster: ClusterConfig, public_key: str, ssh_cidr: str, events: Events,
            owner: str) -> Prepared:
    """`owner`: the caller's UserId, tagged on everything made here (owner.py)."""
    created: dict[str, list[str]] = {"key_pair": [], "security_group": [], "placement_group": []}
    vpc_id = aws_network.resolve_vpc(ec2, cluster.section(AwsSettings).vpc_id)
    _configure_key_pair(ec2, cluster, public_key, owner, created, events)
    group_id = _configure_security_group(ec2, cluster, vpc_id, ssh_cidr, owner, created, events)
    if cluster.section(AwsSettings).placement_group:
        _configure_placement_group(ec2, cluster, owner, created, events)
    return Prepared(created, network(ec2, cluster, vpc_id, group_id))


def network(ec2: Any, cluster: ClusterConfig, vpc_id: str, group_id: str) -> Network:
    subnets = aws_network.subnets_by_zone(ec2, vpc_id)
    aws = cluster.section(AwsSettings)
    offered = aws_network.offered_zones(ec2, aws.instance_types)
    wanted = aws.zones or list(subnets)
    zones_by_type = {t: tuple(z for z in wanted if z in subnets and z in offered.get(t, set()))
                     for t in aws.instance_types}
    return Network(vpc_id, group_id, subnets, zones_by_type)


def find_network(ec2: Any, cluster: ClusterConfig) -> Network:
    vpc_id = aws_network.resolve_vpc(ec2, cluster.section(AwsSettings).vpc_id)
    group = aws_network.find_security_group(ec2, cluster.name, vpc_id)
    if group is None:
        raise ProviderError(f"security group {aws_network.resource_name(cluster.name)} is missing",
                            hint="preparing the cluster again re-creates it")
    return network(ec2, cluster, vpc_id, group["GroupId"])


def _configure_key_pair(ec2: Any, cluster: ClusterConfig, public_key: str, owner: str,
                        created: dict[str, list[str]], events: Events) -> None:
    result = aws_network.ensure_key_pair(ec2, cluster.name, public_key, owner)
    if result.created:
        created["key_pair"].append(result.name)
    verb = "replaced (local key changed)" if result.replaced else "imported" if result.created else "reused"
    events(f"key pair {result.name}: {verb}")


def _configure_security_group(ec2: Any, cluster: ClusterConfig, vpc_id: str, ssh_cidr: str, owner: str,
                              created: dict[str, list[str]], events: Events) -> str:
    result = aws_network.ensure_security_group(ec2, cluster.name, vpc_id, ssh_cidr, owner)
    if result.created:
        created["security_group"].append(result.id)
    changes = [f"+{r}" for r in result.authorized] + [f"-{r}" for r in result.revoked]
    events(f"security group {result.id} in {vpc_id}: {'created' if result.created else 'reused'}"
           + (f" ({'; '.join(changes)})" if changes else ""))
    return result.id


def _configure_placement_group(ec2: Any, cluster: ClusterConfig, owner: str, created: dict[str, list[str]],
                               events: Events) -> None:
    result = aws_network.ensure_placement_group(ec2, cluster.name, owner)
    if result.created:
        created["placement_group"].append(result.name)
    events(f"placement group {result.name} (cluster strategy): {'created' if result.created else 'reused'}")
