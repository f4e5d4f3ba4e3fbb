"""Stateless EC2 steps that `prepare` composes: VPC and subnets, key pair, security group,
placement group. Each finds the existing resource by name or tag before creating one."""
from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError
from botocore.parsers import ResponseParserError

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers.aws.clients import (
    TAG_KEY_DIGEST,
    cluster_tags,
    error_code,
    guarded,
    paginate,
    tag_specs,
    tags_of,
)
from xeoncluster.providers.base import TAG_CLUSTER

PLACEMENT_API_MISSING = frozenset({"NotImplemented", "InternalFailure"})
ROUTE_TARGETS = ("GatewayId", "NatGatewayId", "TransitGatewayId", "NetworkInterfaceId", "InstanceId",
                 "VpcPeeringConnectionId", "CarrierGatewayId", "LocalGatewayId", "CoreNetworkArn")


def resource_name(cluster: str) -> str:
    return f"xeoncluster-{cluster}"


@dataclass(frozen=True)
class KeyPairResult:
    name: str
    id: str
    created: bool
    replaced: bool = False


@dataclass(frozen=True)
class SecurityGroupResult:
    id: str
    created: bool
    authorized: tuple[str, ...] = ()
    revoked: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlacementGroupResult:
    name: str
    created: bool


def resolve_vpc(ec2: Any, vpc_id: str | None) -> str:
    if vpc_id is not None:
        try:
            ec2.describe_vpcs(VpcIds=[vpc_id])
        except ClientError as exc:
            if error_code(exc) == "InvalidVpcID.NotFound":
                raise ConfigError(
                    f"vpc_id '{vpc_id}' does not exist in {ec2.meta.region_name}",
                    hint="set vpc_id to a VPC of this region, or remove it to use the default VPC") from None
            raise
        return vpc_id
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise ConfigError(f"no default VPC in {ec2.meta.region_name}", hint="set vpc_id in cluster.yaml")
    return str(vpcs[0]["VpcId"])


def subnets_by_zone(ec2: Any, vpc_id: str) -> dict[str, str]:
    """One subnet per zone, preferring default-for-AZ, then public, then the roomiest."""
    subnets = paginate(ec2, "describe_subnets", "Subnets",
                       Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "state", "Values": ["available"]}])
    ranked = sorted(subnets, key=lambda s: (bool(s.get("DefaultForAz")), bool(s.get("MapPublicIpOnLaunch")),
                                            int(s.get("AvailableIpAddressCount", 0))), reverse=True)
    chosen: dict[str, str] = {}
    for subnet in ranked:
        chosen.setdefault(subnet["AvailabilityZone"], subnet["SubnetId"])
    return dict(sorted(chosen.items()))


def route_tables_of(ec2: Any, vpc_id: str, subnet_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per subnet, the route table it uses ({} when the VPC has none)."""
    tables = paginate(ec2, "describe_route_tables", "RouteTables", Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
    explicit = {a["SubnetId"]: t for t in tables for a in t.get("Associations", []) if a.get("SubnetId")}
    # A subnet without its own association uses the VPC's main route table.
    main = next((t for t in tables if any(a.get("Main") for a in t.get("Associations", []))), {})
    return {s: explicit.get(s, main) for s in subnet_ids}


def default_route_targets(ec2: Any, vpc_id: str, subnet_ids: list[str]) -> dict[str, str | None]:
    """Per subnet, where its route table sends 0.0.0.0/0 (igw-..., nat-..., ...), or None."""
    return {s: _default_target(table) for s, table in route_tables_of(ec2, vpc_id, subnet_ids).items()}


def _default_target(table: dict[str, Any]) -> str | None:
    for route in table.get("Routes", []):
        if route.get("DestinationCidrBlock") == "0.0.0.0/0" and route.get("State", "active") == "active":
            return next((str(route[k]) for k in ROUTE_TARGETS if route.get(k)), None)
    return None


def offered_zones(ec2: Any, instance_types: list[str]) -> dict[str, set[str]]:
    offers = paginate(ec2, "describe_instance_type_offerings", "InstanceTypeOfferings",
                      LocationType="availability-zone",
                      Filters=[{"Name": "instance-type", "Values": list(instance_types)}])
    zones: dict[str, set[str]] = {t: set() for t in instance_types}
    for offer in offers:
        zones.setdefault(offer["InstanceType"], set()).add(offer["Location"])
    return zones


def key_digest(public_key: str) -> str:
    # The comment field is not part of the key; only the public half is hashed, never a secret.
    kind_and_body = " ".join(public_key.split()[:2])
    return hashlib.sha256(kind_and_body.encode()).hexdigest()


def ensure_key_pair(ec2: Any, cluster: str, public_key: str, owner: str) -> KeyPairResult:
    name = resource_name(cluster)
    digest = key_digest(public_key)
    existing = _find_key_pair(ec2, name)
    replaced = False
    if existing is not None:
        tags = tags_of(existing)
        if tags.get(TAG_CLUSTER) != cluster:
            raise ProviderError(f"key pair '{name}' exists but is not tagged {TAG_CLUSTER}={cluster}",
                                hint="delete or rename that key pair, or choose another cluster name")
        if tags.get(TAG_KEY_DIGEST) == digest:
            return KeyPairResult(name, existing.get("KeyPairId", name), created=False)
        # The local key changed (state directory recreated): the old AWS key would lock us out.
        guarded(f"deleting stale key pair {name}", lambda: ec2.delete_key_pair(KeyName=name))
        replaced = True
    new_tags = cluster_tags(cluster, "key-pair", owner, **{TAG_KEY_DIGEST: digest})
    made = guarded(f"importing key pair {name}", lambda: ec2.import_key_pair(
        KeyName=name, PublicKeyMaterial=public_key.encode(), TagSpecifications=tag_specs(new_tags, "key-pair")))
    return KeyPairResult(name, made.get("KeyPairId", name), created=True, replaced=replaced)


def _find_key_pair(ec2: Any, name: str) -> dict[str, Any] | None:
    try:
        pairs = ec2.describe_key_pairs(KeyNames=[name])["KeyPairs"]
    except ClientError as exc:
        if error_code(exc) == "InvalidKeyPair.NotFound":
            return None
        raise
    return pairs[0] if pairs else None


def find_security_group(ec2: Any, cluster: str, vpc_id: str) -> dict[str, Any] | None:
    groups = ec2.describe_security_groups(Filters=[
        {"Name": "group-name", "Values": [resource_name(cluster)]},
        {"Name": "vpc-id", "Values": [vpc_id]},
    ])["SecurityGroups"]
    return groups[0] if groups else None


def ensure_security_group(ec2: Any, cluster: str, vpc_id: str, ssh_cidr: str, owner: str) -> SecurityGroupResult:
    name = resource_name(cluster)
    group = find_security_group(ec2, cluster, vpc_id)
    created = group is None
    if group is None:
        made = guarded(f"creating security group {name}", lambda: ec2.create_security_group(
            GroupName=name, VpcId=vpc_id, Description=f"xeoncluster {cluster}: self and SSH from one address",
            TagSpecifications=tag_specs(cluster_tags(cluster, "security-group", owner), "security-group")))
        group = {"GroupId": made["GroupId"], "IpPermissions": []}
    elif tags_of(group).get(TAG_CLUSTER) != cluster:
        raise ProviderError(f"security group '{name}' in {vpc_id} is not tagged {TAG_CLUSTER}={cluster}",
                            hint="delete or rename that group, or choose another cluster name")
    group_id = str(group["GroupId"])
    missing, stale = _rule_changes(group.get("IpPermissions", []), group_id, ssh_cidr)
    if stale:
        guarded(f"revoking old SSH rules on {group_id}",
                lambda: ec2.revoke_security_group_ingress(GroupId=group_id, IpPermissions=stale))
    if missing:
        guarded(f"authorizing ingress on {group_id}",
                lambda: ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=missing))
    return SecurityGroupResult(group_id, created, tuple(_describe_rule(r) for r in missing),
                               tuple(_describe_rule(r) for r in stale))


def wanted_rules(group_id: str, ssh_cidr: str) -> list[dict[str, Any]]:
    network = ipaddress.ip_network(ssh_cidr)
    ranges = ({"Ipv6Ranges": [{"CidrIpv6": ssh_cidr, "Description": "ssh from the operator"}]}
              if network.version == 6 else
              {"IpRanges": [{"CidrIp": ssh_cidr, "Description": "ssh from the operator"}]})
    return [
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id, "Description": "cluster nodes"}]},
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, **ranges},
    ]


def _rule_changes(existing: list[dict[str, Any]], group_id: str,
                  ssh_cidr: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    has_self = any(p.get("IpProtocol") == "-1"
                   and any(g.get("GroupId") == group_id for g in p.get("UserIdGroupPairs", []))
                   for p in existing)
    ssh_cidrs = {r.get("CidrIp") or r.get("CidrIpv6") for p in existing if _is_ssh(p)
                 for r in p.get("IpRanges", []) + p.get("Ipv6Ranges", [])}
    self_rule, ssh_rule = wanted_rules(group_id, ssh_cidr)
    missing = ([] if has_self else [self_rule]) + ([] if ssh_cidr in ssh_cidrs else [ssh_rule])
    stale = [_ssh_rule_for(c) for c in sorted(c for c in ssh_cidrs if c and c != ssh_cidr)]
    return missing, stale


def _is_ssh(permission: dict[str, Any]) -> bool:
    return permission.get("IpProtocol") == "tcp" and permission.get("FromPort") == 22 and permission.get("ToPort") == 22


def _ssh_rule_for(cidr: str) -> dict[str, Any]:
    key, field = ("Ipv6Ranges", "CidrIpv6") if ":" in cidr else ("IpRanges", "CidrIp")
    return {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, key: [{field: cidr}]}


def _describe_rule(rule: dict[str, Any]) -> str:
    if rule.get("UserIdGroupPairs"):
        return "all traffic from the group itself"
    cidrs = [r.get("CidrIp") or r.get("CidrIpv6") for r in rule.get("IpRanges", []) + rule.get("Ipv6Ranges", [])]
    return f"tcp/22 from {', '.join(cidrs)}"


def describe_placement_groups(ec2: Any, filters: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The matching placement groups, or None where the endpoint does not implement the API (a bare
    moto_server answers an HTML 500 page, other stand-ins NotImplemented)."""
    try:
        return list(ec2.describe_placement_groups(Filters=filters).get("PlacementGroups", []))
    except ClientError as exc:
        if error_code(exc) in PLACEMENT_API_MISSING:
            return None
        raise
    except ResponseParserError:
        return None


def ensure_placement_group(ec2: Any, cluster: str, owner: str) -> PlacementGroupResult:
    name = resource_name(cluster)
    groups = ec2.describe_placement_groups(
        Filters=[{"Name": "group-name", "Values": [name]}]).get("PlacementGroups", [])
    if any(g.get("State") not in ("deleting", "deleted") for g in groups):
        return PlacementGroupResult(name, created=False)
    guarded(f"creating placement group {name}", lambda: ec2.create_placement_group(
        GroupName=name, Strategy="cluster",
        TagSpecifications=tag_specs(cluster_tags(cluster, "placement-group", owner), "placement-group")))
    return PlacementGroupResult(name, created=True)
