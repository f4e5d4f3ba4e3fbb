"""The whole CLI lifecycle as an IAM user holding exactly the documented policy (docs/aws.md), with the
account's permissions boundary in place: every call goes through the stand-in's IAM gate (moto's
server on loopback), which evaluates the policy's conditions as AWS does. The same user is refused
an instance the tool did not make, a role without the boundary, and another user's cluster."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aws_helpers import UBUNTU_AMI, instances
from botocore.exceptions import ClientError
from gated_server import GatedServer

from xeoncluster.providers.aws.boundary import boundary_arn, boundary_document
from xeoncluster.providers.aws.policy import policy_document
from xeoncluster.providers.base import LaunchRequest
from xeoncluster.standin.iam_users import UserKeys

ACCOUNT = "123456789012"
MASTER_TAG = {"Key": "xeoncluster:role", "Value": "master"}
TRUST = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                                                 "Action": "sts:AssumeRole"}]}


@pytest.fixture
def as_user(xc, gated: GatedServer, monkeypatch: pytest.MonkeyPatch) -> GatedServer:
    """The CLI's boto3 clients reach moto through the gate, signed with the user's key, once the
    administrator made the account's run bucket (the user's policy may not)."""
    keys = gated.user("xc-user", policy_document(ACCOUNT), boundary_document(ACCOUNT))
    monkeypatch.setenv("AWS_ENDPOINT_URL", gated.url)
    assert xc("storage", "init", "--provider", "aws").code == 0
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys.secret_access_key)
    return gated


def act_as(monkeypatch: pytest.MonkeyPatch, keys: UserKeys, home: Path) -> None:
    """The CLI from here on runs as this user, on a machine whose state folder is `home`."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys.secret_access_key)
    monkeypatch.setenv("XEONCLUSTER_HOME", str(home))


def test_the_cli_lifecycle_runs_as_a_user_holding_exactly_the_documented_policy(xc, as_user: GatedServer, ec2):
    for argv in (["plan", "--name", "t1", "--nodes", "2"], ["up", "--name", "t1", "--nodes", "2"],
                 ["status", "--name", "t1"], ["images"]):
        result = xc(*argv)
        assert result.code == 0, (argv, result.err, as_user.denied())
        assert as_user.denied() == {}, argv
    assert len(instances(ec2)) == 2
    assert {i["IamInstanceProfile"]["Arn"] for i in instances(ec2)} == {
        "arn:aws:iam::123456789012:instance-profile/xeoncluster-t1-us-east-1"}
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
    mine = [{"Key": "xeoncluster:owner", "Value": as_user.client("sts", keys).get_caller_identity()["UserId"]}]
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        user_ec2.terminate_instances(InstanceIds=[foreign])
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        user_ec2.create_tags(Resources=[foreign], Tags=[{"Key": "xeoncluster:cluster", "Value": "t1"}])
    with pytest.raises(ClientError, match="AccessDenied"):
        user_iam.create_role(RoleName="xeoncluster-x", AssumeRolePolicyDocument=json.dumps(TRUST), Tags=mine)
    with pytest.raises(ClientError, match="AccessDenied"):
        user_iam.create_role(RoleName="xeoncluster-x", AssumeRolePolicyDocument=json.dumps(TRUST), Tags=mine,
                             PermissionsBoundary=f"arn:aws:iam::{ACCOUNT}:policy/AdministratorAccess")
    user_iam.create_role(RoleName="xeoncluster-x", AssumeRolePolicyDocument=json.dumps(TRUST), Tags=mine,
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
    # The session IMDS hands the master: named for its instance (the boundary refuses any other).
    master = next(i["InstanceId"] for i in instances(ec2) if MASTER_TAG in i["Tags"])
    creds = boto3.client("sts").assume_role(RoleArn=role, RoleSessionName=master)["Credentials"]
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


def test_another_user_holding_the_same_policy_is_refused_the_first_user_s_cluster(
        xc, as_user: GatedServer, ec2, monkeypatch: pytest.MonkeyPatch, tmp_path, xc_home) -> None:
    """Everything `up` makes carries the maker's UserId (`xeoncluster:owner`); the documented policy lets
    a user act only on what carries their own. A colleague with the same policy is refused by IAM, and
    the CLI says whose the cluster is in one line."""
    keys = as_user.user("xc-user", policy_document(ACCOUNT))  # the maker's own key, to switch back to
    act_as(monkeypatch, keys, xc_home)
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    maker = {t["Value"] for i in instances(ec2) for t in i["Tags"] if t["Key"] == "xeoncluster:owner"}
    colleague = as_user.user("xc-colleague", policy_document(ACCOUNT))
    other = as_user.client("sts", colleague).get_caller_identity()["UserId"]
    assert len(maker) == 1 and other not in maker
    [owner] = maker
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        as_user.client("ec2", colleague).terminate_instances(InstanceIds=[instances(ec2)[0]["InstanceId"]])

    # The colleague's CLI, on their own machine (no state for t1), finds the cluster by its tag.
    act_as(monkeypatch, colleague, tmp_path / "colleague")
    run = xc("down", "--name", "t1", "--provider", "aws")
    assert run.code == 1 and [line for line in run.err_lines if line.startswith("error:")] == [run.error], run.err
    assert (f"cluster t1 belongs to another identity: its resources carry xeoncluster:owner={owner} and you are "
            f"{other}; nothing of yours was removed" in run.error)
    assert "Traceback" not in run.err and len(instances(ec2)) == 2
    # By hand only: `down` looks for the colleague's own resources of that name, and touches no other.
    assert as_user.denied() == {"xc-colleague ec2:TerminateInstances": 1}
    act_as(monkeypatch, keys, xc_home)
    assert xc("down", "--name", "t1").code == 0 and instances(ec2) == []
    assert as_user.denied() == {"xc-colleague ec2:TerminateInstances": 1}


def the_agent_of_t1(xc, shell, ec2, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The run agent's context on t1's master: the master's role session, as IMDS hands it out."""
    import boto3

    from xeoncluster.agent import context as agent_context
    from xeoncluster.cluster.command_context import make_context

    role = "arn:aws:iam::123456789012:role/xeoncluster-t1-us-east-1"
    master = next(i["InstanceId"] for i in instances(ec2) if MASTER_TAG in i["Tags"])
    creds = boto3.client("sts").assume_role(RoleArn=role, RoleSessionName=master)["Credentials"]
    for name, key in (("AWS_ACCESS_KEY_ID", "AccessKeyId"), ("AWS_SECRET_ACCESS_KEY", "SecretAccessKey"),
                      ("AWS_SESSION_TOKEN", "SessionToken")):
        monkeypatch.setenv(name, creds[key])
    monkeypatch.setattr(agent_context, "make_context",
                        lambda config: make_context(config, xc.provider_factory, shell.factory))
    return agent_context.agent_context("t1")


def test_the_run_agent_replaces_a_worker_for_the_user_who_made_the_cluster(
        xc, as_user: GatedServer, ec2, shell, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent on the master acts with the master's role, whose session is another identity: it tags
    what it launches with the owner `up` recorded in the state, which the role's policy requires."""
    from test_cli_repair import spot_interrupt

    from xeoncluster.operations.repair import repair

    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    [maker] = {t["Value"] for i in instances(ec2) for t in i["Tags"] if t["Key"] == "xeoncluster:owner"}
    ctx = the_agent_of_t1(xc, shell, ec2, monkeypatch)
    record = ctx.state.load()
    assert record is not None and record.owner == maker
    spot_interrupt(record.node("node1").id)
    repair(ctx, record, ctx.shell(), [record.node("node1")], len(record.nodes))
    replacement = next(i for i in instances(ec2) if i["InstanceId"] == record.node("node1").id)
    assert {"Key": "xeoncluster:owner", "Value": maker} in replacement["Tags"]
    # It carries the cluster's role, which the role may pass (to EC2, itself only): any node can take over.
    assert replacement["IamInstanceProfile"]["Arn"].endswith("instance-profile/xeoncluster-t1-us-east-1")
    assert as_user.denied() == {} and as_user.gate.allowed["xeoncluster-t1-us-east-1 ec2:RunInstances"] == 1


def test_the_run_agent_launches_nothing_beyond_the_cluster_s_size_plus_its_replacements(
        xc, as_user: GatedServer, ec2, shell, monkeypatch: pytest.MonkeyPatch) -> None:
    """IAM cannot count: code on every node holds the role too, and may launch the cluster's type. The
    agent holds itself to the cluster's size plus the replacements under way."""
    from test_cli_repair import spot_interrupt

    from xeoncluster.core.errors import ProviderError
    from xeoncluster.operations.repair import recorded_base, recorded_image, repair

    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    ctx = the_agent_of_t1(xc, shell, ec2, monkeypatch)
    record = ctx.state.load()
    # What the user's script on any node can do with the role: one more of the cluster's own launch.
    stray = ctx.provider.launch(LaunchRequest(ctx.config, 1, recorded_image(record), "worker", 5,
                                              near=record.node("node0"), base=recorded_base(record)))
    spot_interrupt(record.node("node1").id)
    with pytest.raises(ProviderError, match=r"not launching 1 more instance\(s\) for cluster t1: it has 2 running"):
        repair(ctx, record, ctx.shell(), [record.node("node1")], len(record.nodes))
    assert sorted(i["InstanceId"] for i in instances(ec2)) == sorted([record.node("node0").id, stray[0].id])


def test_a_colleague_s_failed_bake_of_the_same_image_stays_and_another_is_baked_beside_it(
        xc, as_user: GatedServer, ec2, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """`up` removes a failed bake of its image key before baking again; a colleague's is theirs to remove."""
    from moto.ec2.models import ec2_backends

    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    [failed] = [i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]]
    ec2_backends[ACCOUNT]["us-east-1"].amis[failed].state = "failed"
    act_as(monkeypatch, as_user.user("xc-colleague", policy_document(ACCOUNT)), tmp_path / "colleague")
    run = xc("up", "--name", "t2", "--nodes", "1")
    assert run.code == 0, run.err
    assert failed not in run.out + run.err  # not theirs: never looked at, let alone deregistered
    assert len(ec2.describe_images(Owners=["self"])["Images"]) == 2
    assert as_user.denied() == {}


def test_the_role_s_base_image_tag_follows_what_image_names_as_the_user(as_user: GatedServer) -> None:
    """The boundary lets a role launch the image its tag names (how `image: ami-...` shares an image between
    users): the user retags their own role when `image:` changes, and may change no other tag."""
    from xeoncluster.providers.aws.role import RoleScope, ensure_master_role

    keys = as_user.user("xc-user", policy_document(ACCOUNT))
    iam = as_user.client("iam", keys)
    me = as_user.client("sts", keys).get_caller_identity()["UserId"]
    scope = RoleScope("t1", "us-east-1", ACCOUNT, "sg-0aaaaaaaaaaaaaaaa", ("subnet-0aaaaaaaaaaaaaaaa",),
                      UBUNTU_AMI, None, owner=me)

    def base_tag() -> str | None:
        tags = iam.get_role(RoleName="xeoncluster-t1-us-east-1")["Role"].get("Tags", [])
        return next((t["Value"] for t in tags if t["Key"] == "xeoncluster:base-image"), None)

    for base in (UBUNTU_AMI, "ami-0123456789abcdef0", UBUNTU_AMI):
        ensure_master_role(iam, replace(scope, base_image=base))
        assert base_tag() == base
    with pytest.raises(ClientError, match="AccessDenied"):
        iam.tag_role(RoleName="xeoncluster-t1-us-east-1", Tags=[{"Key": "xeoncluster:owner", "Value": "someone"}])
    assert set(as_user.denied()) == {"xc-user iam:TagRole"}


def test_two_users_of_one_account_keep_their_roles_and_runs_apart(
        xc, as_user: GatedServer, ec2, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Alice and Bob hold exactly the documented policy and share the account's boundary and run bucket.
    Each runs up, keeps runs, lists them and goes down with 0 denied calls; Bob can neither read, write
    nor delete Alice's runs, neither can open the bucket, and Alice's own role, given an inline `*`
    policy, reaches neither Bob's instances nor Bob's runs."""
    import boto3

    from xeoncluster.cluster.state import StateDir
    from xeoncluster.providers.config import load_config

    users = {name: as_user.user(name, policy_document(ACCOUNT)) for name in ("alice", "bob")}
    ids = {name: as_user.client("sts", keys).get_caller_identity()["UserId"] for name, keys in users.items()}
    for name, keys in users.items():
        act_as(monkeypatch, keys, tmp_path / name)
        assert xc("up", "--name", name[0] + "1", "--nodes", "2").code == 0, name
        record = StateDir(name[0] + "1").load()
        assert record is not None and record.storage is not None and record.storage.prefix == ids[name]
        storage = xc.provider_factory(load_config(None, record.config), lambda _m: None).open_storage(record.storage)
        storage.put_text(record.storage.run_key(name[0] + "1", "r1") + "/run.json", "{}")  # as the agent keeps runs
        assert xc("storage", "ls", "--name", name[0] + "1").code == 0
    assert as_user.denied() == {}

    bucket = f"xeoncluster-{ACCOUNT}-us-east-1"
    alices_run = f"{ids['alice']}/a1/runs/r1/run.json"
    bob_s3 = as_user.client("s3", users["bob"])
    for call in (lambda: bob_s3.get_object(Bucket=bucket, Key=alices_run),
                 lambda: bob_s3.put_object(Bucket=bucket, Key=alices_run, Body=b"{}"),
                 lambda: bob_s3.delete_object(Bucket=bucket, Key=alices_run),
                 lambda: bob_s3.list_objects_v2(Bucket=bucket, Prefix=f"{ids['alice']}/"),
                 lambda: bob_s3.put_bucket_policy(Bucket=bucket, Policy="{}"),
                 lambda: bob_s3.delete_public_access_block(Bucket=bucket)):
        with pytest.raises(ClientError, match="AccessDenied"):
            call()
    assert set(as_user.denied()) == {"bob s3:GetObject", "bob s3:PutObject", "bob s3:DeleteObject",
                                     "bob s3:ListBucket", "bob s3:PutBucketPolicy", "bob s3:PutBucketPublicAccessBlock"}

    # Alice makes her cluster's role admin inside its boundary, and uses it where it lives: on her master.
    role = "xeoncluster-a1-us-east-1"
    as_user.client("iam", users["alice"]).put_role_policy(RoleName=role, PolicyName="everything", PolicyDocument=(
        json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})))
    act_as(monkeypatch, users["alice"], tmp_path / "alice")
    alices_master = StateDir("a1").load().node("node0").id
    creds = boto3.client("sts").assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/{role}",
                                            RoleSessionName=alices_master)["Credentials"]
    session = UserKeys("alices-master", creds["AccessKeyId"], creds["SecretAccessKey"])
    role_ec2, role_s3 = (as_user.client(s, session, creds["SessionToken"]) for s in ("ec2", "s3"))
    act_as(monkeypatch, users["bob"], tmp_path / "bob")
    bobs_worker = StateDir("b1").load().node("node1").id
    assert role_s3.get_object(Bucket=bucket, Key=alices_run)["Body"].read() == b"{}"  # her own: yes
    for call in (lambda: role_ec2.terminate_instances(InstanceIds=[bobs_worker]),
                 lambda: role_s3.get_object(Bucket=bucket, Key=f"{ids['bob']}/b1/runs/r1/run.json"),
                 lambda: role_s3.put_object(Bucket=bucket, Key=f"{ids['bob']}/b1/runs/r1/run.json", Body=b"x"),
                 lambda: role_s3.list_objects_v2(Bucket=bucket, Prefix=f"{ids['bob']}/"),
                 lambda: role_s3.put_bucket_policy(Bucket=bucket, Policy="{}")):
        with pytest.raises(ClientError, match=r"UnauthorizedOperation|AccessDenied"):
            call()
    # The same role assumed anywhere but on her instance (its trust policy is hers to write): nothing.
    elsewhere = boto3.client("sts").assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/{role}",
                                                RoleSessionName="laptop")["Credentials"]
    with pytest.raises(ClientError, match="AccessDenied"):
        as_user.client("s3", UserKeys("elsewhere", elsewhere["AccessKeyId"], elsewhere["SecretAccessKey"]),
                       elsewhere["SessionToken"]).get_object(Bucket=bucket, Key=alices_run)
    assert ec2.describe_instances(InstanceIds=[bobs_worker])["Reservations"][0]["Instances"][0]["State"]["Name"] \
        == "running"

    before = as_user.denied()
    for name, keys in users.items():
        act_as(monkeypatch, keys, tmp_path / name)
        assert xc("down", "--name", name[0] + "1").code == 0, name
    assert as_user.denied() == before and instances(ec2) == []


def test_an_administrator_removes_a_user_s_cluster_by_naming_its_owner(
        xc, as_user: GatedServer, ec2, monkeypatch: pytest.MonkeyPatch, tmp_path, xc_home) -> None:
    keys = as_user.user("xc-user", policy_document(ACCOUNT))
    act_as(monkeypatch, keys, xc_home)
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    owner = as_user.client("sts", keys).get_caller_identity()["UserId"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # the administrator, on another machine
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("XEONCLUSTER_HOME", str(tmp_path / "admin"))
    mine = xc("down", "--name", "t1", "--provider", "aws")
    assert mine.code == 1 and f"--owner {owner}`" in mine.error and len(instances(ec2)) == 2
    assert xc("down", "--name", "t1", "--provider", "aws", "--owner", owner).code == 0
    assert instances(ec2) == []


def test_a_colleague_s_image_of_the_same_key_never_becomes_your_nodes_disk(
        xc, as_user: GatedServer, ec2, aws, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The image key is a digest of public inputs, the same for every user of this version in a region. Bob
    bakes one; Alice's `plan` names it and leaves it, her `up` bakes her own, and her master's role (capped by
    the boundary) is refused a launch from Bob's."""
    import boto3

    from xeoncluster.cluster.state import StateDir

    users = {name: as_user.user(name, policy_document(ACCOUNT)) for name in ("alice", "bob")}
    act_as(monkeypatch, users["bob"], tmp_path / "bob")
    assert xc("up", "--name", "b1", "--nodes", "2").code == 0
    [bobs] = [i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]]

    act_as(monkeypatch, users["alice"], tmp_path / "alice")
    plan = xc("plan", "--name", "a1", "--nodes", "2")
    assert plan.code == 0, plan.err
    assert f"image {bobs} of this key belongs to another identity" in plan.out + plan.err
    assert "image: none cached; node0 runs the playbooks, is baked" in plan.out
    assert xc("up", "--name", "a1", "--nodes", "2").code == 0
    record = StateDir("a1").load()
    assert record is not None
    launched = {i["ImageId"] for i in instances(ec2, "a1")}
    hers = {i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]} - {bobs}
    assert len(hers) == 1 and launched == {UBUNTU_AMI} | hers, (launched, hers, bobs)
    assert as_user.denied() == {}

    worker = next(dict(params) for _, operation, params in aws.calls if operation == "RunInstances"
                  and {"Key": "xeoncluster:cluster", "Value": "a1"} in params["TagSpecifications"][0]["Tags"]
                  and {"Key": "xeoncluster:role", "Value": "worker"} in params["TagSpecifications"][0]["Tags"])
    creds = boto3.client("sts").assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/xeoncluster-a1-us-east-1",
                                            RoleSessionName=record.node("node0").id)["Credentials"]
    session = as_user.client("ec2", UserKeys("alices-master", creds["AccessKeyId"], creds["SecretAccessKey"]),
                             token=creds["SessionToken"])
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        session.run_instances(**{**worker, "ClientToken": "from-bobs", "ImageId": bobs})
    assert as_user.denied() == {"xeoncluster-a1-us-east-1 ec2:RunInstances": 1}
    assert session.run_instances(**{**worker, "ClientToken": "from-hers"})["Instances"]
