"""The whole CLI lifecycle as an IAM user holding exactly the documented policy (docs/aws.md), with the
account's permissions boundary in place: every call goes through the stand-in's IAM gate (moto's
server on loopback), which evaluates the policy's conditions as AWS does. The same user is refused
an instance the tool did not make and a role without the boundary."""
from __future__ import annotations

import json

import pytest
from aws_helpers import UBUNTU_AMI, instances
from botocore.exceptions import ClientError
from gated_server import GatedServer

from provisioner.providers.aws_boundary import boundary_arn, boundary_document
from provisioner.providers.aws_policy import policy_document
from standin.iam_users import UserKeys

ACCOUNT = "123456789012"
TRUST = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                                                 "Action": "sts:AssumeRole"}]}


@pytest.fixture
def as_user(gated: GatedServer, monkeypatch: pytest.MonkeyPatch) -> GatedServer:
    """The CLI's boto3 clients reach moto through the gate, signed with the user's key."""
    keys = gated.user("xc-user", policy_document(ACCOUNT), boundary_document(ACCOUNT))
    monkeypatch.setenv("AWS_ENDPOINT_URL", gated.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys.secret_access_key)
    return gated


def test_the_cli_lifecycle_runs_as_a_user_holding_exactly_the_documented_policy(xc, as_user: GatedServer, ec2):
    for argv in (["plan", "--name", "t1", "--nodes", "2"], ["up", "--name", "t1", "--nodes", "2"],
                 ["status", "--name", "t1"], ["images"]):
        result = xc(*argv)
        assert result.code == 0, (argv, result.err, as_user.denied())
        assert as_user.denied() == {}, argv
    assert len(instances(ec2)) == 2
    profile = next(i["IamInstanceProfile"]["Arn"] for i in instances(ec2) if "IamInstanceProfile" in i)
    assert profile.endswith("instance-profile/xeoncluster-t1-us-east-1")
    assert xc("down", "--name", "t1", "--purge-images").code == 0
    assert as_user.denied() == {} and instances(ec2) == []
    calls = {key.split(" ", 1)[1] for key in as_user.gate.allowed}
    assert {"ec2:RunInstances", "ec2:TerminateInstances", "ec2:CreateImage", "ec2:DeregisterImage",
            "iam:CreateRole", "iam:AddRoleToInstanceProfile", "ssm:GetParameter"} <= calls


def test_the_same_user_is_refused_an_instance_the_tool_did_not_make_and_a_role_without_the_boundary(
        as_user: GatedServer, ec2) -> None:
    keys = as_user.user("xc-user", policy_document(ACCOUNT))
    foreign = ec2.run_instances(ImageId=UBUNTU_AMI, MinCount=1, MaxCount=1, InstanceType="c7i.large",
                                TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                    {"Key": "team", "Value": "databases"}]}])["Instances"][0]["InstanceId"]
    user_ec2, user_iam = as_user.client("ec2", keys), as_user.client("iam", keys)
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        user_ec2.terminate_instances(InstanceIds=[foreign])
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        user_ec2.create_tags(Resources=[foreign], Tags=[{"Key": "xeoncluster:cluster", "Value": "t1"}])
    with pytest.raises(ClientError, match="AccessDenied"):
        user_iam.create_role(RoleName="xeoncluster-x", AssumeRolePolicyDocument=json.dumps(TRUST))
    with pytest.raises(ClientError, match="AccessDenied"):
        user_iam.create_role(RoleName="xeoncluster-x", AssumeRolePolicyDocument=json.dumps(TRUST),
                             PermissionsBoundary=f"arn:aws:iam::{ACCOUNT}:policy/AdministratorAccess")
    user_iam.create_role(RoleName="xeoncluster-x", AssumeRolePolicyDocument=json.dumps(TRUST),
                         PermissionsBoundary=boundary_arn(ACCOUNT))
    with pytest.raises(ClientError, match="AccessDenied"):
        user_iam.delete_role_permissions_boundary(RoleName="xeoncluster-x")
    assert set(as_user.denied()) == {"xc-user ec2:TerminateInstances", "xc-user ec2:CreateTags",
                                     "xc-user iam:CreateRole", "xc-user iam:DeleteRolePermissionsBoundary"}


def test_the_master_role_the_user_made_replaces_a_worker_within_its_boundary(xc, as_user: GatedServer, ec2, aws):
    """What the run agent does with the master's role after a spot interruption, capped by the boundary."""
    import boto3

    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    worker = next(dict(params) for _, operation, params in aws.calls if operation == "RunInstances"
                  and {"Key": "xeoncluster:role", "Value": "worker"} in params["TagSpecifications"][0]["Tags"])
    role = "arn:aws:iam::123456789012:role/xeoncluster-t1-us-east-1"
    creds = boto3.client("sts").assume_role(RoleArn=role, RoleSessionName="master")["Credentials"]
    session = as_user.client("ec2", UserKeys("master", creds["AccessKeyId"], creds["SecretAccessKey"]),
                             token=creds["SessionToken"])
    replaced = session.run_instances(**{**worker, "ClientToken": "replacement"})["Instances"][0]["InstanceId"]
    assert session.terminate_instances(InstanceIds=[replaced])["TerminatingInstances"]
    other = ec2.run_instances(ImageId=UBUNTU_AMI, MinCount=1, MaxCount=1, InstanceType="c7i.large",
                              TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                  {"Key": "xeoncluster:cluster", "Value": "t2"}]}])["Instances"][0]["InstanceId"]
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        session.terminate_instances(InstanceIds=[other])
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        session.run_instances(**{**worker, "ClientToken": "bigger", "InstanceType": "p5.48xlarge"})
    assert set(as_user.denied()) == {"xeoncluster-t1-us-east-1 ec2:TerminateInstances",
                                     "xeoncluster-t1-us-east-1 ec2:RunInstances"}
