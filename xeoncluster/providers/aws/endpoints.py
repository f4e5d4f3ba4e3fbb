"""Which of the cluster's calls leave its VPC through a VPC endpoint: there, and only there, AWS tells a
request signed with an instance's credentials from the same credentials used elsewhere.

AWS sets `aws:Ec2InstanceSourceVpc` and `aws:Ec2InstanceSourcePrivateIPv4` on every request signed with
an instance role's credentials, wherever they are used, and `aws:SourceVpc` and `aws:VpcSourceIp` only on
requests that come through a VPC endpoint. So the boundary refuses a call that came through an endpoint
of another VPC, or from another address (boundary.py), and where every call to a service goes through an
endpoint, the role's policy refuses that service's calls that came through none (role.py): credentials
copied off a node then work nowhere else for it.
"""
from __future__ import annotations

from typing import Any

from xeoncluster.providers.aws.clients import paginate
from xeoncluster.providers.aws.network import route_tables_of

S3 = "s3"
EC2 = "ec2"


def services_through_endpoints(ec2: Any, region: str, vpc_id: str, subnet_ids: list[str]) -> tuple[str, ...]:
    """The services ("s3", "ec2") every call of the cluster's subnets reaches only through an endpoint."""
    endpoints = paginate(ec2, "describe_vpc_endpoints", "VpcEndpoints", Filters=[
        {"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "vpc-endpoint-state", "Values": ["available"]}])
    found = []
    gateways = [set(e.get("RouteTableIds", [])) for e in endpoints if _is_s3_gateway(e, region)]
    if gateways and subnet_ids:
        # A gateway endpoint serves a subnet only through the route table the subnet uses.
        tables = {t.get("RouteTableId") for t in route_tables_of(ec2, vpc_id, subnet_ids).values()}
        if any(tables <= routed for routed in gateways):
            found.append(S3)
    # An interface endpoint with private DNS answers for the service's name in the whole VPC.
    if any(e.get("ServiceName") == f"com.amazonaws.{region}.ec2" and e.get("VpcEndpointType") == "Interface"
           and e.get("PrivateDnsEnabled") for e in endpoints):
        found.append(EC2)
    return tuple(found)


def _is_s3_gateway(endpoint: dict[str, Any], region: str) -> bool:
    return endpoint.get("ServiceName") == f"com.amazonaws.{region}.s3" and endpoint.get("VpcEndpointType") == "Gateway"


def endpoint_note(through: tuple[str, ...]) -> str:
    """What a copied node credential can still do, in one line (docs/aws.md says how to close it)."""
    if set(through) >= {S3, EC2}:
        return "the nodes' role works only through this VPC's endpoints: a credential copied off a node is refused"
    left = " and ".join(s.upper() for s in (S3, EC2) if s not in through)
    return (f"{left} calls leave this VPC through no endpoint, so a credential copied off a node works for "
            "them from anywhere until it expires (docs/aws.md: 'Credentials on the nodes')")
