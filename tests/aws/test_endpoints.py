"""Which services the cluster's subnets reach only through a VPC endpoint, as moto holds them, and what
`up` writes into the role for them: a credential copied off a node is then refused for those services."""
from __future__ import annotations

import json

from xeoncluster.providers.aws.endpoints import endpoint_note, services_through_endpoints

REGION = "us-east-1"


def default_network(ec2) -> tuple[str, list[str], str]:
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    subnets = [s["SubnetId"] for s in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]]
    tables = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["RouteTables"]
    main = next(t["RouteTableId"] for t in tables if any(a.get("Main") for a in t.get("Associations", [])))
    return vpc, subnets, main


def test_an_s3_gateway_counts_only_where_it_routes_every_cluster_subnet(ec2, aws) -> None:
    vpc, subnets, main = default_network(ec2)
    assert services_through_endpoints(ec2, REGION, vpc, subnets) == ()
    other = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=other, SubnetId=subnets[0])
    ec2.create_vpc_endpoint(VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.s3", VpcEndpointType="Gateway",
                            RouteTableIds=[main])
    assert services_through_endpoints(ec2, REGION, vpc, subnets) == ()  # subnets[0] routes S3 elsewhere
    assert services_through_endpoints(ec2, REGION, vpc, subnets[1:]) == ("s3",)
    ec2.create_vpc_endpoint(VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.ec2", VpcEndpointType="Interface",
                            SubnetIds=subnets[:1], PrivateDnsEnabled=True)
    assert services_through_endpoints(ec2, REGION, vpc, subnets[1:]) == ("s3", "ec2")


def test_up_binds_the_role_s_s3_calls_to_the_vpc_endpoint_and_says_what_is_left(xc, ec2, aws) -> None:
    import boto3

    vpc, _, main = default_network(ec2)
    run = xc("up", "--name", "t1", "--nodes", "1")
    assert run.code == 0 and endpoint_note(()) in run.err
    ec2.create_vpc_endpoint(VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.s3", VpcEndpointType="Gateway",
                            RouteTableIds=[main])
    assert xc("down", "--name", "t1").code == 0
    run = xc("up", "--name", "t1", "--nodes", "1")
    assert run.code == 0 and endpoint_note(("s3",)) in run.err
    policy = boto3.client("iam").get_role_policy(RoleName="xeoncluster-t1-us-east-1",
                                                 PolicyName="xeoncluster-agent")["PolicyDocument"]
    [bound] = [s for s in policy["Statement"] if s["Sid"] == "S3OnlyThroughTheVpcEndpoint"]
    assert bound["Effect"] == "Deny" and json.dumps(bound["Condition"]) == '{"Null": {"aws:SourceVpc": "true"}}'
    assert xc("down", "--name", "t1").code == 0
