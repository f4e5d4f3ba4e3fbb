"""The master's role: `up` makes it (and an instance profile) for the master only, scoped to the
cluster; `down` and a rolled-back `up` remove it. What the policy allows is checked with the
stand-in's evaluator, which (unlike moto) evaluates conditions: its own instances yes, another
cluster's no."""
from __future__ import annotations

import json

import pytest
from aws_helpers import instances

from provisioner.providers.aws_role import RoleScope, master_policy
from standin.iam_policy import Question, allowed
from standin.iam_requests import ec2_questions

ROLE = "xeoncluster-t1-us-east-1"


def role_policy(iam) -> dict:
    return iam.get_role_policy(RoleName=ROLE, PolicyName="xeoncluster-agent")["PolicyDocument"]


def test_up_gives_the_master_alone_a_role_scoped_to_the_cluster_and_down_removes_it(xc, ec2, aws):
    import boto3

    iam = boto3.client("iam", region_name="us-east-1")
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    roles = {i["InstanceId"]: next(t["Value"] for t in i["Tags"] if t["Key"] == "xeoncluster:role")
             for i in instances(ec2)}
    profiles = {roles[i["InstanceId"]]: i.get("IamInstanceProfile", {}).get("Arn", "") for i in instances(ec2)}
    assert profiles["master"].endswith(f"instance-profile/{ROLE}") and profiles["worker"] == ""
    trust = iam.get_role(RoleName=ROLE)["Role"]["AssumeRolePolicyDocument"]
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    text = json.dumps(role_policy(iam))
    assert '"aws:RequestTag/xeoncluster:cluster": "t1"' in text
    assert '"ec2:ResourceTag/xeoncluster:cluster": "t1"' in text
    assert '"Resource": "*"' in text  # only for the Describe calls and GetConsoleOutput
    assert xc("down", "--name", "t1").code == 0
    for call in (lambda: iam.get_role(RoleName=ROLE), lambda: iam.get_instance_profile(InstanceProfileName=ROLE)):
        with pytest.raises(iam.exceptions.NoSuchEntityException):
            call()


def test_a_rolled_back_up_removes_the_role(xc, aws, monkeypatch):
    import boto3
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models import EC2Backend

    def refuse(*args, **kwargs):
        raise EC2ClientError("Unsupported", "no such thing here")

    monkeypatch.setattr(EC2Backend, "run_instances", refuse)
    assert xc("up", "--name", "t1", "--nodes", "1").code == 1
    with pytest.raises(boto3.client("iam").exceptions.NoSuchEntityException):
        boto3.client("iam").get_role(RoleName=ROLE)


SCOPE = RoleScope("a", "us-east-1", "123456789012", "sg-0aaaaaaaaaaaaaaaa", ("subnet-0aaaaaaaaaaaaaaaa",),
                  "ami-0bbbbbbbbbbbbbbbb", "k" * 64)


def ask(action: str, params: dict[str, str], tags: dict[str, dict[str, str]]) -> list[bool]:
    questions = ec2_questions(action, params, "us-east-1", "123456789012", lambda rid: tags.get(rid, {}))
    return [allowed([master_policy(SCOPE)], q) for q in questions]


def test_the_role_terminates_its_own_cluster_s_instances_only() -> None:
    tags = {"i-own": {"xeoncluster:cluster": "a"}, "i-other": {"xeoncluster:cluster": "b"}}
    assert ask("TerminateInstances", {"InstanceId.1": "i-own"}, tags) == [True]
    assert ask("TerminateInstances", {"InstanceId.1": "i-other"}, tags) == [False]
    assert ask("TerminateInstances", {"InstanceId.1": "i-own", "InstanceId.2": "i-other"}, tags) == [True, False]
    assert ask("CreateTags", {"ResourceId.1": "i-other", "Tag.1.Key": "xeoncluster:cluster", "Tag.1.Value": "a"},
               tags) == [False]
    assert allowed([master_policy(SCOPE)], Question("ec2:DescribeInstances", "*"))
    assert not allowed([master_policy(SCOPE)], Question("ec2:DeleteSecurityGroup", "*"))


def run_params(cluster: str, image: str = "ami-0bbbbbbbbbbbbbbbb", group: str = "sg-0aaaaaaaaaaaaaaaa") -> dict:
    params = {"ImageId": image, "InstanceType": "c7i.2xlarge", "KeyName": "xeoncluster-a",
              "NetworkInterface.1.SubnetId": "subnet-0aaaaaaaaaaaaaaaa", "NetworkInterface.1.SecurityGroupId.1": group,
              "InstanceMarketOptions.MarketType": "spot"}
    for index, kind in enumerate(("instance", "volume", "spot-instances-request"), start=1):
        params |= {f"TagSpecification.{index}.ResourceType": kind, f"TagSpecification.{index}.Tag.1.Key":
                   "xeoncluster:cluster", f"TagSpecification.{index}.Tag.1.Value": cluster}
    return params


def test_the_role_launches_only_tagged_instances_with_its_own_network_and_images() -> None:
    images = {"ami-0ccccccccccccccc": {"xeoncluster:image-key": "k" * 64},
              "ami-0dddddddddddddddd": {"xeoncluster:image-key": "other"}}
    assert all(ask("RunInstances", run_params("a"), images))
    assert all(ask("RunInstances", run_params("a", image="ami-0ccccccccccccccc"), images))  # baked for this key
    assert not all(ask("RunInstances", run_params("b"), images))          # another cluster's tag
    assert not all(ask("RunInstances", run_params("a", image="ami-0dddddddddddddddd"), images))
    assert not all(ask("RunInstances", run_params("a", group="sg-0eeeeeeeeeeeeeeee"), images))
