"""Read-only checks before anything is created. Bad input raises a one-line ConfigError."""
from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers.aws import catalog
from xeoncluster.providers.aws.boundary import check_boundary
from xeoncluster.providers.aws.clients import (
    CREDENTIALS_HINT,
    OPTIONAL_RETRIES,
    AwsClients,
    error_code,
    error_text,
    is_credentials_error,
)
from xeoncluster.providers.aws.images import BAKE_ROOT_GIB, base_image_id, describe_image, image_gib
from xeoncluster.providers.aws.network import default_route_targets, offered_zones, resolve_vpc, subnets_by_zone
from xeoncluster.providers.aws.spec import AwsSettings
from xeoncluster.providers.node_kinds import Market

if TYPE_CHECKING:
    from xeoncluster.providers.config import ClusterConfig

QUOTAS = {Market.ON_DEMAND: ("L-1216C47A", "Running On-Demand Standard instances"),
          Market.SPOT: ("L-34B43A08", "All Standard Spot Instance Requests")}
STANDARD_FAMILIES = tuple("acdhimrtz")


@dataclass(frozen=True)
class TypeInfo:
    name: str
    vcpus: int
    architectures: tuple[str, ...]


def check_region(clients: AwsClients) -> None:
    region = clients.region
    known = {r for p in clients.session.get_available_partitions()
             for r in clients.session.get_available_regions("ec2", partition_name=p)}
    if region not in known:
        close = difflib.get_close_matches(region, sorted(known), n=1)
        suggestion = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"unknown AWS region '{region}'{suggestion}", hint="set region: or pass --region")


def check_credentials(clients: AwsClients) -> str:
    try:
        return str(clients.client("sts").get_caller_identity()["Arn"])
    except EndpointConnectionError:
        raise ConfigError(f"cannot reach AWS STS in {clients.region}",
                          hint="check the region and your network") from None
    except (ClientError, BotoCoreError) as exc:
        if is_credentials_error(exc):
            detail = "no AWS credentials found" \
                if error_code(exc) in ("NoCredentialsError", "PartialCredentialsError") \
                else f"AWS rejected the credentials ({error_text(exc)})"
            raise ConfigError(detail, hint=CREDENTIALS_HINT) from None
        raise


def check_region_enabled(ec2: Any) -> None:
    region = ec2.meta.region_name
    try:
        found = ec2.describe_regions(RegionNames=[region], AllRegions=True)["Regions"]
    except EndpointConnectionError:
        raise ConfigError(f"region '{region}' has no reachable EC2 endpoint", hint="check region:") from None
    if found and found[0].get("OptInStatus") == "not-opted-in":
        raise ConfigError(f"region '{region}' is not enabled for this account",
                          hint="enable it in the AWS console (Account > AWS Regions) or choose another region")


def check_instance_types(ec2: Any, names: list[str]) -> dict[str, TypeInfo]:
    infos: dict[str, TypeInfo] = {}
    for name in names:
        try:
            raw = ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"]
        except ClientError as exc:
            if error_code(exc) != "InvalidInstanceType":
                raise
            raw = []
        if not raw:
            close = catalog.nearest(name)
            suggestion = f" (did you mean '{close}'?)" if close and close != name else ""
            raise ConfigError(f"unknown instance type '{name}'{suggestion}", hint="fix instance_types in cluster.yaml")
        item = raw[0]
        infos[name] = TypeInfo(name, int(item["VCpuInfo"]["DefaultVCpus"]),
                               tuple(item.get("ProcessorInfo", {}).get("SupportedArchitectures", [])))
        if "x86_64" not in infos[name].architectures:
            raise ConfigError(f"instance type '{name}' is {'/'.join(infos[name].architectures)}, not x86_64",
                              hint="xeoncluster needs Intel Xeon (x86_64) types such as c7i.2xlarge")
    return infos


def check_zones(ec2: Any, cluster: ClusterConfig, vpc_id: str) -> list[str]:
    """Zones that will be tried: the configured ones (which must exist), else all with a subnet."""
    region_zones = [z["ZoneName"] for z in ec2.describe_availability_zones(
        Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}])["AvailabilityZones"]]
    for zone in cluster.section(AwsSettings).zones:
        if zone not in region_zones:
            raise ConfigError(f"zone '{zone}' does not exist in {ec2.meta.region_name}",
                              hint=f"zones here: {', '.join(region_zones)}")
    subnets = subnets_by_zone(ec2, vpc_id)
    wanted = cluster.section(AwsSettings).zones or region_zones
    usable = [z for z in wanted if z in subnets]
    if not usable:
        raise ConfigError(f"{vpc_id} has no subnet in {', '.join(wanted)}",
                          hint="add a subnet there, or change zones / vpc_id")
    return usable


def check_offerings(ec2: Any, instance_types: list[str], zones: list[str]) -> list[str]:
    offered = offered_zones(ec2, instance_types)
    notes = []
    for name in instance_types:
        here = [z for z in zones if z in offered.get(name, set())]
        if not here:
            elsewhere = sorted(offered.get(name, set()))
            where = f"; offered in {', '.join(elsewhere)}" if elsewhere else " in this region"
            raise ConfigError(f"instance type '{name}' is not offered in {', '.join(zones)}{where}",
                              hint="change aws.zones or aws.instance_types")
        if len(here) < len(zones):
            notes.append(f"{name} is offered only in {', '.join(here)}")
    return notes


def check_routes(ec2: Any, vpc_id: str, zones: list[str], instance_types: list[str],
                 required: bool = True) -> list[str]:
    """The subnets a launch may use must route 0.0.0.0/0 somewhere: nodes install from apt, PyPI
    and the Hugging Face hub."""
    offered = offered_zones(ec2, instance_types)
    subnets = subnets_by_zone(ec2, vpc_id)
    used = {subnets[z]: z for z in zones if any(z in offered.get(t, set()) for t in instance_types)}
    missing = [s for s, target in default_route_targets(ec2, vpc_id, list(used)).items() if target is None]
    if not missing:
        return []
    error = ConfigError(f"subnet {missing[0]} ({used[missing[0]]}) has no default route (0.0.0.0/0): nodes there "
                        "would have no route to package mirrors (apt, PyPI, Hugging Face)",
                        hint="add a NAT gateway or internet gateway route to its route table, or set zones / "
                             "vpc_id to subnets that have one")
    if required:
        raise error
    return [f"warning: {error.message}; `up` would stop here"]


def check_image(clients: AwsClients, image: str, root_gib: int, require_base: bool = True) -> list[str]:
    """The given AMI must exist and fit the root volume; otherwise the Ubuntu base must be published
    (unless only planning), and baked images are BAKE_ROOT_GIB, which the root volume must hold."""
    if image.startswith("ami-"):
        raw = describe_image(clients.ec2, image)
        if raw is None:
            raise ConfigError(f"image '{image}' not found in {clients.region}",
                              hint="set image: auto, or an AMI of this region")
        _check_fits(root_gib, image_gib(raw), f"image {image}")
        return []
    if image == "auto":
        _check_fits(root_gib, BAKE_ROOT_GIB, "the images xeoncluster bakes")
    if image.startswith("local-"):
        return []
    try:
        base_image_id(clients.client("ssm"))
    except ConfigError as exc:
        if require_base:
            raise
        return [f"warning: {exc.message}; `up` would stop here"]
    return []


def _check_fits(root_gib: int, needed: int, what: str) -> None:
    if root_gib < needed:
        raise ConfigError(f"aws.root_volume_gib: {root_gib} GiB is smaller than {what} ({needed} GiB)",
                          hint=f"set aws.root_volume_gib: {needed} or more")


def check_quota(clients: AwsClients, cluster: ClusterConfig, info: TypeInfo) -> list[str]:
    if not info.name.startswith(STANDARD_FAMILIES):
        return [f"vCPU quota not checked for {info.name} (not a Standard family)"]
    aws = cluster.section(AwsSettings)
    demand = {aws.effective_master_market: info.vcpus}
    demand[aws.worker_market] = demand.get(aws.worker_market, 0) + info.vcpus * (cluster.nodes - 1)
    notes = []
    for market, vcpus in demand.items():
        if vcpus == 0:
            continue
        code, title = QUOTAS[market]
        try:
            quotas = clients.client("service-quotas", retries=OPTIONAL_RETRIES)
            limit = float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
        except Exception as exc:  # noqa: BLE001 - the quota API is optional (moto lacks it)
            notes.append(f"vCPU quota '{title}' not checked ({error_text(exc)})")
            continue
        if vcpus > limit:
            raise ConfigError(f"{cluster.nodes} x {info.name} needs {vcpus} {market} vCPUs but the '{title}' "
                              f"quota in {clients.region} is {limit:g}",
                              hint="request a quota increase in Service Quotas, or use fewer or smaller nodes")
        notes.append(f"{market} vCPUs: {vcpus} of a {limit:g} quota (running instances not counted)")
    return notes


def resolve_ssh_cidr(cidr: str, caller_ip: Callable[[], str]) -> str:
    if cidr != "auto":
        return cidr
    try:
        address = ipaddress.ip_address(caller_ip().strip())
    except Exception as exc:  # noqa: BLE001 - any failure means the same thing to the user
        raise ConfigError(f"could not find your public IP for ssh.cidr=auto ({str(exc) or type(exc).__name__})",
                          hint="set ssh.cidr to your address, e.g. 203.0.113.7/32") from None
    if address.is_loopback or address.is_unspecified or address.is_multicast or address.is_link_local:
        raise ConfigError(f"ssh.cidr=auto found {address}, which is not a public address",
                          hint="set ssh.cidr to your public address, e.g. 203.0.113.7/32")
    if address.version != 4:
        # The nodes have IPv4 addresses only: a /128 rule would never match the connection.
        raise ConfigError(f"ssh.cidr=auto found the IPv6 address {address}; the nodes are reached over IPv4",
                          hint="set ssh.cidr to your public IPv4 address, e.g. 203.0.113.7/32")
    return f"{address}/32"


def ssh_notes(cidr: str) -> list[str]:
    if ipaddress.ip_network(cidr).prefixlen == 0:
        return [f"warning: ssh.cidr {cidr} opens SSH to the whole internet"]
    return [f"SSH allowed only from {cidr}"]


def run_preflight(clients: AwsClients, cluster: ClusterConfig, resolve_cidr: Callable[[], str],
                  require_base_image: bool = True) -> list[str]:
    """Every read-only check `up` needs. `plan` passes require_base_image=False: a missing Ubuntu
    SSM parameter, default route or permissions boundary becomes a warning note there, while `up`
    stops with a ConfigError."""
    check_region(clients)
    who = check_credentials(clients)
    ec2 = clients.ec2
    try:
        check_region_enabled(ec2)
        aws = cluster.section(AwsSettings)
        vpc_id = resolve_vpc(ec2, aws.vpc_id)
        infos = check_instance_types(ec2, aws.instance_types)
        zones = check_zones(ec2, cluster, vpc_id)
        notes = [f"AWS identity {who}", f"VPC {vpc_id}, zones {', '.join(zones)}"]
        notes += check_offerings(ec2, aws.instance_types, zones)
        notes += check_image(clients, cluster.image, aws.root_volume_gib, require_base_image)
        notes += check_quota(clients, cluster, infos[aws.instance_types[0]])
        notes += check_routes(ec2, vpc_id, zones, aws.instance_types, require_base_image)
        # The caller's ARN holds its account: arn:aws:sts::ACCOUNT:...
        notes += check_boundary(clients.client("iam"), who.split(":")[4], require_base_image)
    except (ClientError, BotoCoreError) as exc:
        if is_credentials_error(exc):
            raise ConfigError(f"AWS denied a read-only check ({error_text(exc)})", hint=CREDENTIALS_HINT) from None
        raise ProviderError(f"AWS preflight check failed: {error_text(exc)}") from exc
    return notes + ssh_notes(resolve_cidr())
