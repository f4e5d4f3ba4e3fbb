"""The stand-in's IAM gate enforces an IAM user's policy and a permissions boundary as AWS does:
conditions evaluated, an explicit Deny winning, a role capped by its boundary. Through moto's server
on loopback, with users made as `aws-standin.sh user` makes them; the admin's key passes untouched."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_helpers import REGION, UBUNTU_AMI
from botocore.exceptions import ClientError
from gated_server import GatedServer

from xeoncluster.standin.iam_users import UserKeys

ACCOUNT = "123456789012"
CLUSTER_TAG = "xeoncluster:cluster"
TRUST = {"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "sts:AssumeRole"}]}


def policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(action: str | list[str], resource: str = "*", condition: dict[str, Any] | None = None,
          effect: str = "Allow") -> dict[str, Any]:
    return {"Effect": effect, "Action": action, "Resource": resource, **({"Condition": condition} if condition else {})}


def refused(call: Any, code: str) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    assert caught.value.response["Error"]["Code"] == code, caught.value.response
    return str(caught.value.response["Error"]["Message"])


def launch(server: GatedServer, tags: dict[str, str]) -> str:
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    made = server.client("ec2").run_instances(ImageId=UBUNTU_AMI, MinCount=1, MaxCount=1, InstanceType="c7i.large",
                                              TagSpecifications=spec)
    return str(made["Instances"][0]["InstanceId"])


def test_a_user_terminates_only_instances_that_carry_the_cluster_tag(gated: GatedServer) -> None:
    keys = gated.user("alice", policy(allow("ec2:TerminateInstances", f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/*",
                                            {"Null": {f"ec2:ResourceTag/{CLUSTER_TAG}": "false"}}),
                                      allow("ec2:DescribeInstances")))
    untagged, tagged = launch(gated, {}), launch(gated, {CLUSTER_TAG: "a"})
    ec2 = gated.client("ec2", keys)
    message = refused(lambda: ec2.terminate_instances(InstanceIds=[untagged]), "UnauthorizedOperation")
    assert f"user/alice is not authorized to perform: ec2:TerminateInstances on resource: " \
           f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{untagged}" in message
    assert ec2.terminate_instances(InstanceIds=[tagged])["TerminatingInstances"][0]["InstanceId"] == tagged
    assert ec2.describe_instances()["Reservations"]
    # The admin's key is not a user's: it passes as in moto.
    assert gated.client("ec2").terminate_instances(InstanceIds=[untagged])["TerminatingInstances"]
    assert gated.denied() == {"alice ec2:TerminateInstances": 1}


def test_a_user_creates_a_role_only_with_the_boundary(gated: GatedServer) -> None:
    boundary = f"arn:aws:iam::{ACCOUNT}:policy/xeoncluster-boundary"
    keys = gated.user("bob", policy(allow("iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/xeoncluster-*",
                                          {"StringEquals": {"iam:PermissionsBoundary": boundary}})))
    iam = gated.client("iam", keys)
    message = refused(lambda: iam.create_role(RoleName="xeoncluster-x", AssumeRolePolicyDocument=json.dumps(TRUST)),
                      "AccessDenied")
    assert "iam:CreateRole on resource: arn:aws:iam::123456789012:role/xeoncluster-x because no identity-based " \
           "policy allows the iam:CreateRole action" in message
    refused(lambda: iam.create_role(RoleName="xeoncluster-x", AssumeRolePolicyDocument=json.dumps(TRUST),
                                    PermissionsBoundary=f"arn:aws:iam::{ACCOUNT}:policy/other"), "AccessDenied")
    made = iam.create_role(RoleName="xeoncluster-x", AssumeRolePolicyDocument=json.dumps(TRUST),
                           PermissionsBoundary=boundary)
    assert made["Role"]["PermissionsBoundary"]["PermissionsBoundaryArn"] == boundary


def test_a_role_with_a_boundary_is_refused_what_the_boundary_does_not_allow(gated: GatedServer) -> None:
    admin_iam = gated.client("iam")
    capped = admin_iam.create_policy(PolicyName="read-only-ec2", PolicyDocument=json.dumps(
        policy(allow("ec2:Describe*"), allow("sts:AssumeRole"))))["Policy"]["Arn"]
    admin_iam.create_role(RoleName="capped", AssumeRolePolicyDocument=json.dumps(TRUST), PermissionsBoundary=capped)
    admin_iam.put_role_policy(RoleName="capped", PolicyName="admin", PolicyDocument=json.dumps(policy(allow("*"))))
    role = gated.client("sts").assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/capped", RoleSessionName="session")
    creds = role["Credentials"]
    session = gated.client("ec2", keys_of(creds), token=creds["SessionToken"])
    assert "Reservations" in session.describe_instances()
    message = refused(lambda: session.run_instances(ImageId=UBUNTU_AMI, MinCount=1, MaxCount=1,
                                                    InstanceType="c7i.large"), "UnauthorizedOperation")
    assert "because no permissions boundary allows the ec2:RunInstances action" in message
    iam = gated.client("iam", keys_of(creds), token=creds["SessionToken"])
    refused(lambda: iam.create_role(RoleName="escape", AssumeRolePolicyDocument=json.dumps(TRUST)), "AccessDenied")
    assert gated.denied() == {"capped ec2:RunInstances": 1, "capped iam:CreateRole": 1}


def test_an_explicit_deny_wins_over_any_allow(gated: GatedServer) -> None:
    keys = gated.user("carol", policy(allow("*"), allow("ec2:TerminateInstances", effect="Deny"),
                                      allow("iam:DeleteRolePermissionsBoundary", f"arn:aws:iam::{ACCOUNT}:role/*",
                                            effect="Deny")))
    instance = launch(gated, {CLUSTER_TAG: "a"})
    ec2 = gated.client("ec2", keys)
    message = refused(lambda: ec2.terminate_instances(InstanceIds=[instance]), "UnauthorizedOperation")
    assert message.endswith("with an explicit deny in an identity-based policy")
    assert ec2.describe_instances()["Reservations"]
    gated.client("iam").create_role(RoleName="r", AssumeRolePolicyDocument=json.dumps(TRUST))
    refused(lambda: gated.client("iam", keys).delete_role_permissions_boundary(RoleName="r"), "AccessDenied")


def test_the_user_command_leaves_exactly_the_policy_given(gated: GatedServer) -> None:
    first = gated.user("dave", policy(allow("ec2:*")))
    second = gated.user("dave", policy(allow("ec2:DescribeInstances")))
    refused(lambda: gated.client("ec2", first).describe_instances(), "AuthFailure")
    ec2 = gated.client("ec2", second)
    assert "Reservations" in ec2.describe_instances()
    refused(lambda: ec2.describe_images(Owners=["self"]), "UnauthorizedOperation")
    assert second.env_lines() == (f"AWS_ACCESS_KEY_ID={second.access_key_id}\n"
                                  f"AWS_SECRET_ACCESS_KEY={second.secret_access_key}\n")


def keys_of(credentials: dict[str, Any]) -> UserKeys:
    return UserKeys("session", credentials["AccessKeyId"], credentials["SecretAccessKey"])


def test_a_condition_key_the_request_lacks_counts_as_aws_counts_it(gated: GatedServer) -> None:
    """Leaving a tag out must not slip past a Deny on StringNotEquals; ForAllValues over no tags holds."""
    keys = gated.user("erin", policy(
        allow(["ec2:RunInstances", "ec2:CreateTags"], "*", {"ForAllValues:StringEquals": {"aws:TagKeys": ["team"]}}),
        allow("ec2:RunInstances", f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/*",
              {"StringNotEquals": {"aws:RequestTag/team": "ml"}}, effect="Deny")))
    ec2 = gated.client("ec2", keys)
    run = {"ImageId": UBUNTU_AMI, "MinCount": 1, "MaxCount": 1, "InstanceType": "c7i.large"}

    def tagged(**tags: str) -> list[dict[str, Any]]:
        return [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]

    message = refused(lambda: ec2.run_instances(**run), "UnauthorizedOperation")
    assert message.endswith("with an explicit deny in an identity-based policy")
    refused(lambda: ec2.run_instances(**run, TagSpecifications=tagged(team="web")), "UnauthorizedOperation")
    refused(lambda: ec2.run_instances(**run, TagSpecifications=tagged(team="ml", Name="x")), "UnauthorizedOperation")
    made = ec2.run_instances(**run, TagSpecifications=tagged(team="ml"))
    assert made["Instances"][0]["Tags"] == [{"Key": "team", "Value": "ml"}]


def test_aws_standin_user_prints_the_keys_of_a_user_holding_exactly_the_policy_file(
        gated: GatedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`aws-standin.sh user NAME POLICY_JSON BOUNDARY_JSON`, with the running daemon's moto replaced by this one."""
    from xeoncluster.standin import __main__ as standin_main
    from xeoncluster.standin import lifecycle

    monkeypatch.setattr(lifecycle, "read_state", lambda paths: {"moto_url": gated.url})
    monkeypatch.setattr(lifecycle, "in_namespace", lambda paths, action: action())
    (tmp_path / "user.json").write_text(json.dumps(policy(allow("ec2:DescribeInstances"))))
    (tmp_path / "boundary.json").write_text(json.dumps(policy(allow("ec2:Describe*"))))
    assert standin_main.main(["user", "frank", str(tmp_path / "user.json"), str(tmp_path / "boundary.json"),
                              "--boundary-name", "test-boundary"]) == 0
    lines = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    keys = UserKeys("frank", lines["AWS_ACCESS_KEY_ID"], lines["AWS_SECRET_ACCESS_KEY"])
    assert "Reservations" in gated.client("ec2", keys).describe_instances()
    refused(lambda: gated.client("ec2", keys).describe_images(Owners=["self"]), "UnauthorizedOperation")
    boundary = gated.client("iam").get_policy(PolicyArn=f"arn:aws:iam::{ACCOUNT}:policy/test-boundary")["Policy"]
    assert boundary["DefaultVersionId"] == "v1"
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(SystemExit, match="cannot read a policy document"):
        standin_main.main(["user", "frank", str(tmp_path / "broken.json")])


def test_aws_userid_is_what_get_caller_identity_answers_for_a_user_and_a_role_session(gated: GatedServer) -> None:
    """`${aws:userid}` in a policy becomes the caller's UserId, as AWS fills it: an IAM user's unique id,
    a role session's ROLEID:SESSION; so a tag holding that id marks what its holder may act on."""
    mine = {"StringEquals": {"ec2:ResourceTag/xeoncluster:owner": "${aws:userid}"}}
    owner_policy = policy(allow("ec2:TerminateInstances", f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/*", mine),
                          allow("sts:AssumeRole"))
    keys = gated.user("dave", owner_policy)
    admin_iam = gated.client("iam")
    admin_iam.create_role(RoleName="owner-scoped", AssumeRolePolicyDocument=json.dumps(TRUST))
    admin_iam.put_role_policy(RoleName="owner-scoped", PolicyName="p", PolicyDocument=json.dumps(owner_policy))
    creds = gated.client("sts").assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/owner-scoped",
                                            RoleSessionName="i-0123456789abcdef0")["Credentials"]
    for name, identity, token in (("dave", keys, None), ("owner-scoped", keys_of(creds), creds["SessionToken"])):
        user_id = gated.client("sts", identity, token=token).get_caller_identity()["UserId"]
        assert name != "owner-scoped" or user_id.endswith(":i-0123456789abcdef0")
        theirs, ours = launch(gated, {"xeoncluster:owner": "AIDASOMEONEELSE00001"}), launch(
            gated, {"xeoncluster:owner": user_id})
        ec2 = gated.client("ec2", identity, token=token)
        refused(lambda: ec2.terminate_instances(InstanceIds=[theirs]), "UnauthorizedOperation")  # noqa: B023
        assert ec2.terminate_instances(InstanceIds=[ours])["TerminatingInstances"]
    assert gated.denied() == {"dave ec2:TerminateInstances": 1, "owner-scoped ec2:TerminateInstances": 1}
