"""The user's IAM policy: exactly the actions the provider calls, every mutating one scoped to what
the tool tagged, roles only under the permissions boundary, and no path to admin. What it allows is
asked of the stand-in's evaluator (conditions included); docs/aws.md shows the same JSON."""
from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aws_helpers import PUBLIC_KEY, cluster_config, write_config

from xeoncluster.providers.aws import policy as aws_policy
from xeoncluster.providers.aws.boundary import boundary_arn, boundary_document
from xeoncluster.providers.aws.iam_doc import CANONICAL
from xeoncluster.standin.iam_lookup import Lookup, RoleFacts
from xeoncluster.standin.iam_policy import Question, allowed, refusal
from xeoncluster.standin.iam_requests import ec2_questions, iam_questions, s3_questions

REPO = Path(__file__).resolve().parents[2]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def provider_source() -> str:
    return "\n".join(p.read_text() for p in (REPO / "xeoncluster" / "providers" / "aws").glob("*.py")
                     if p.name != "policy.py")


def test_every_action_in_the_policy_is_called_by_the_provider():
    source = provider_source()
    for action in aws_policy.actions():
        if action in aws_policy.TAG_ON_CREATE_ONLY:
            continue
        service, name = action.split(":", 1)
        method = aws_policy.S3_CALLED_AS.get(name, snake(name)) if service == "s3" else snake(name)
        assert re.search(rf"[.\"]{method}[\"(]", source), f"{action}: {method} is not called by the provider"
    assert len(set(aws_policy.actions())) == len(aws_policy.actions())


def test_every_call_of_a_full_lifecycle_is_in_the_policy(xc, make_provider, aws):
    write_config("aws:\n  placement_group: true\n  master_market: on-demand\n")
    assert xc("plan", "--name", "t1", "--nodes", "3").code == 0
    assert xc("up", "--name", "t1", "--nodes", "3").code == 0
    assert xc("status", "--name", "t1").code == 0
    assert xc("images").code == 0
    # Paths the CLI reaches only when a cluster outlived its state: a stale SSH rule and a new local key.
    moved = make_provider(caller_ip=lambda: "198.51.100.9")
    moved.prepare(cluster_config(name="t1", placement_group=True), PUBLIC_KEY)
    # What a run does with its storage (train, the agent, logs), and a bucket the user names.
    location = moved.storage_location(cluster_config(name="t1"), "auto", Path("/unused"), create=True)
    stored = moved.open_storage(location)
    stored.put_text("t1/runs/r/run.json", "{}")
    assert stored.get_text("t1/runs/r/run.json") == "{}" and stored.objects("t1")
    stored.delete(["t1/runs/r/run.json"])
    moved.storage_location(cluster_config(name="t1"), f"s3://{location.container}/mine", Path("/unused"), create=False)
    assert xc("down", "--name", "t1", "--purge-images").code == 0
    assert xc("down", "--name", "t1").code == 0

    # Every boto3 call in this test came from a provider (the recorder also sees the placement-group
    # calls it answers itself, which never reach the provider's own before-call hook).
    # As the administrator (moto's key), `up` also made the run bucket: the one-time step a user's
    # policy leaves to the administrator (`storage init`).
    called = {aws_policy.iam_action(service, operation) for service, operation, _ in aws.calls}
    setup = set(aws_policy.actions(aws_policy.ADMIN_SETUP))
    assert called - setup <= set(aws_policy.actions()), called - setup - set(aws_policy.actions())
    assert called & setup and not setup & set(aws_policy.actions())
    # Everything but tag-on-create and the calls only an unusual state needs was exercised here.
    rarely = {"ec2:CancelSpotInstanceRequests",  # moto's spot instances carry no open request after terminate
              "iam:PutRolePermissionsBoundary",  # only for a role made before there was a boundary
              # only when `image:` names another base than the role's tag (test_cli_as_user.py walks it)
              "iam:TagRole"}
    assert set(aws_policy.actions()) - called - aws_policy.TAG_ON_CREATE_ONLY - rarely == set()


def test_the_docs_show_both_policies_for_the_placeholder_account():
    aws_doc = (REPO / "docs" / "aws.md").read_text()
    for marker, expected in (("user-policy", aws_policy.policy_document(aws_policy.DOC_ACCOUNT)),
                             ("boundary", boundary_document(aws_policy.DOC_ACCOUNT))):
        block = re.search(rf"<!-- json:{marker} -->\n```json\n(.*?)\n```", aws_doc, re.S)
        assert block, f"no ```json block after <!-- json:{marker} --> in docs/aws.md"
        assert json.loads(block.group(1)) == expected, marker


def test_every_allowed_action_is_one_the_provider_calls_and_the_documents_fit_iam_s_limits():
    document = aws_policy.policy_document(ACCOUNT)
    granted = [a for s in document["Statement"] if s["Effect"] == "Allow" for a in s["Action"]]
    for action in aws_policy.actions():
        assert any(fnmatch.fnmatchcase(action, pattern) for pattern in granted), f"{action} is granted nowhere"
    for pattern in granted:
        assert any(fnmatch.fnmatchcase(a, pattern) for a in aws_policy.actions()), f"{pattern} is never called"
    # A managed policy holds at most 6,144 characters, whitespace not counted.
    for each in (document, boundary_document(ACCOUNT)):
        assert len(re.sub(r"\s", "", json.dumps(each))) < 6144


# -- what the user's policy allows, asked of the stand-in's evaluator ------------------------------
ACCOUNT = "123456789012"
USER = aws_policy.policy_document(ACCOUNT)
BOUNDARY = boundary_arn(ACCOUNT)
ADMIN = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


@dataclass(frozen=True)
class Account(Lookup):
    """The account's resources as the evaluator needs them: tags and keys by id, roles by name."""

    tagged: dict[str, dict[str, str]] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)  # image id -> owning account
    roles: dict[str, RoleFacts] = field(default_factory=dict)
    buckets: dict[str, str] = field(default_factory=dict)

    def tags(self, kind: str, ref: str) -> dict[str, str]:
        return self.tagged.get(ref, {})

    def keys(self, kind: str, ref: str) -> dict[str, list[str]]:
        return {"ec2:Owner": [self.owners[ref]]} if ref in self.owners else {}

    def role(self, name: str) -> RoleFacts | None:
        return self.roles.get(name)

    def profile_role(self, profile: str) -> str | None:
        return f"arn:aws:iam::{ACCOUNT}:role/{profile}"

    def profile_tags(self, profile: str) -> dict[str, str]:
        return dict(self.roles[profile].tags) if profile in self.roles else {}

    def bucket_account(self, bucket: str) -> str | None:
        return self.buckets.get(bucket)


# The user's aws:userid (what sts GetCallerIdentity answers as UserId), and a colleague's.
ME, COLLEAGUE = "AIDAEXAMPLEUSERME0001", "AIDAEXAMPLECOLLEAGUE1"
OWN = {"xeoncluster:cluster": "t1", "xeoncluster:owner": ME}
THEIRS = {"xeoncluster:cluster": "t2", "xeoncluster:owner": COLLEAGUE}
WORLD = Account(
    tagged={"i-own": OWN, "i-t2": THEIRS, "i-prod": {"team": "web"}, "sg-own": OWN, "sg-t2": THEIRS,
            "sg-prod": {}, "xeoncluster-t1": OWN, "xeoncluster-t2": THEIRS, "vol-prod": {}, "vol-t2": THEIRS,
            "snap-prod": {}, "snap-t2": THEIRS, "ami-prod": {}, "ami-t2": THEIRS, "i-untagged-owner": {
                "xeoncluster:cluster": "t1"}},
    owners={"ami-ubuntu": CANONICAL, "ami-baked": ACCOUNT, "ami-stranger": "999988887777"},
    roles={"xeoncluster-t1-us-east-1": RoleFacts(f"arn:aws:iam::{ACCOUNT}:role/xeoncluster-t1-us-east-1", BOUNDARY,
                                                 {"xeoncluster:owner": ME}),
           "xeoncluster-t2-us-east-1": RoleFacts(f"arn:aws:iam::{ACCOUNT}:role/xeoncluster-t2-us-east-1", BOUNDARY,
                                                 {"xeoncluster:owner": COLLEAGUE}),
           "xeoncluster-legacy": RoleFacts(f"arn:aws:iam::{ACCOUNT}:role/xeoncluster-legacy")},
    buckets={"xeoncluster-123456789012-us-east-1": ACCOUNT, "xeoncluster-999988887777-us-east-1": "999988887777"})


def may(service: str, action: str, params: dict[str, str], policies: list[dict[str, Any]] | None = None) -> bool:
    """Whether the user (or `policies`) may make this request: every question it asks is allowed."""
    questions = (ec2_questions(action, params, "us-east-1", ACCOUNT, WORLD) if service == "ec2"
                 else iam_questions(action, params, ACCOUNT, WORLD))
    assert questions
    # The gate puts the caller's aws:userid into every question (xeoncluster/standin/iam_gate.py).
    return all(allowed(policies or [USER], replace(q, context={"aws:userid": [ME], **q.context})) for q in questions)


def launch(image: str = "ami-ubuntu", group: str = "sg-own", tagged: bool = True, profile: str = "",
           owner: str = ME) -> dict[str, str]:
    params = {"ImageId": image, "InstanceType": "c7i.2xlarge", "KeyName": "xeoncluster-t1",
              "NetworkInterface.1.SubnetId": "subnet-1", "NetworkInterface.1.SecurityGroupId.1": group}
    for index, kind in enumerate(("instance", "volume"), start=1) if tagged else ():
        params |= tag_spec(index, kind, {"xeoncluster:cluster": "t1", "xeoncluster:owner": owner})
    return params | ({"IamInstanceProfile.Name": profile} if profile else {})


def tag_spec(index: int, kind: str, tags: dict[str, str]) -> dict[str, str]:
    spec = {f"TagSpecification.{index}.ResourceType": kind}
    for number, (key, value) in enumerate(tags.items(), start=1):
        prefix = f"TagSpecification.{index}.Tag.{number}"
        spec |= {f"{prefix}.Key": key, f"{prefix}.Value": value}
    return spec


def baked_tags() -> dict[str, str]:
    """CreateImage's TagSpecifications, as `up` gives them: the image and its snapshots are the user's."""
    return tag_spec(1, "image", OWN) | tag_spec(2, "snapshot", OWN)


def owned(owner: str = ME) -> dict[str, str]:
    """IAM's Tags.member.N: the tags `up` gives the master's role and profile."""
    return {"Tags.member.1.Key": "xeoncluster:cluster", "Tags.member.1.Value": "t1",
            "Tags.member.2.Key": "xeoncluster:owner", "Tags.member.2.Value": owner}


def test_the_user_creates_roles_only_under_the_boundary_and_never_loosens_it():
    role = {"RoleName": "xeoncluster-t1-us-east-1", "AssumeRolePolicyDocument": "{}", **owned()}
    assert may("iam", "CreateRole", role | {"PermissionsBoundary": BOUNDARY})
    assert not may("iam", "CreateRole", role)
    assert not may("iam", "CreateRole", role | {"PermissionsBoundary": "arn:aws:iam::aws:policy/AdministratorAccess"})
    assert not may("iam", "CreateRole", role | {"RoleName": "admin", "PermissionsBoundary": BOUNDARY})
    assert may("iam", "PutRolePolicy", {"RoleName": "xeoncluster-t1-us-east-1", "PolicyName": "p"})
    assert not may("iam", "PutRolePolicy", {"RoleName": "xeoncluster-legacy", "PolicyName": "p"})
    assert may("iam", "PutRolePermissionsBoundary", {"RoleName": "xeoncluster-legacy", "PermissionsBoundary": BOUNDARY})
    assert not may("iam", "PutRolePermissionsBoundary", {"RoleName": "xeoncluster-t1-us-east-1",
                                                        "PermissionsBoundary": f"arn:aws:iam::{ACCOUNT}:policy/wide"})
    assert not may("iam", "DeleteRolePermissionsBoundary", {"RoleName": "xeoncluster-t1-us-east-1"})
    assert may("iam", "GetPolicy", {"PolicyArn": BOUNDARY})
    for change in ("CreatePolicyVersion", "SetDefaultPolicyVersion", "DeletePolicyVersion", "DeletePolicy"):
        assert not may("iam", change, {"PolicyArn": BOUNDARY, "VersionId": "v1"}), change
        # Even a holder of broader rights elsewhere: the explicit Deny wins.
        assert not may("iam", change, {"PolicyArn": BOUNDARY, "VersionId": "v1"}, [USER, ADMIN]), change


def test_the_user_acts_only_on_what_the_tool_tagged():
    assert may("ec2", "TerminateInstances", {"InstanceId.1": "i-own"})
    assert not may("ec2", "TerminateInstances", {"InstanceId.1": "i-prod"})
    assert not may("ec2", "TerminateInstances", {"InstanceId.1": "i-own", "InstanceId.2": "i-prod"})
    for instance in ("i-own", "i-t2", "i-prod"):  # nothing is tagged after creation: no moving between clusters
        assert not may("ec2", "CreateTags", {"ResourceId.1": instance, "Tag.1.Key": "xeoncluster:cluster",
                                             "Tag.1.Value": "t1"}), instance
    assert may("ec2", "DeleteSecurityGroup", {"GroupId": "sg-own"})
    for action, params in (("DeleteSecurityGroup", {"GroupId": "sg-prod"}),
                           ("AuthorizeSecurityGroupIngress", {"GroupId": "sg-prod", "IpProtocol": "tcp"}),
                           ("RevokeSecurityGroupIngress", {"GroupId": "sg-prod"}),
                           ("ModifyVolume", {"VolumeId": "vol-prod", "Size": "200"}),
                           ("DeleteSnapshot", {"SnapshotId": "snap-prod"}),
                           ("DeregisterImage", {"ImageId": "ami-prod"}),
                           ("CreateImage", {"InstanceId": "i-prod", "Name": "copy"}),
                           ("GetConsoleOutput", {"InstanceId": "i-prod"}),
                           ("DeleteKeyPair", {"KeyName": "deploy"}),
                           ("CreateSecurityGroup", {"GroupName": "x", "GroupDescription": "x", "VpcId": "vpc-1"})):
        assert not may("ec2", action, params), action


def test_the_user_acts_only_on_the_clusters_they_made():
    """A colleague's cluster carries the tool's tags too, but another owner: the same policy refuses it."""
    for ref in ("i-t2", "i-untagged-owner"):  # another owner's, and one made before owners were tagged
        for action in ("TerminateInstances", "GetConsoleOutput"):
            key = "InstanceId.1" if action == "TerminateInstances" else "InstanceId"
            assert not may("ec2", action, {key: ref}), (action, ref)
    for action, params in (("DeleteSecurityGroup", {"GroupId": "sg-t2"}),
                           ("AuthorizeSecurityGroupIngress", {"GroupId": "sg-t2", "IpProtocol": "tcp"}),
                           ("ModifyVolume", {"VolumeId": "vol-t2", "Size": "200"}),
                           ("DeleteSnapshot", {"SnapshotId": "snap-t2"}), ("DeregisterImage", {"ImageId": "ami-t2"}),
                           ("CreateImage", {"InstanceId": "i-t2", "Name": "copy", **baked_tags()}),
                           ("DeleteKeyPair", {"KeyName": "xeoncluster-t2"})):
        assert not may("ec2", action, params), action
    assert may("ec2", "CreateImage", {"InstanceId": "i-own", "Name": "copy", **baked_tags()})
    assert may("ec2", "DeleteKeyPair", {"KeyName": "xeoncluster-t1"})
    # Made with another owner tag, or launched into a colleague's security group: refused.
    assert not may("ec2", "RunInstances", launch(owner=COLLEAGUE))
    assert not may("ec2", "RunInstances", launch(group="sg-t2"))
    assert not may("ec2", "ImportKeyPair", {"KeyName": "xeoncluster-t1", **tag_spec(1, "key-pair", THEIRS)})
    assert may("ec2", "ImportKeyPair", {"KeyName": "xeoncluster-t1", **tag_spec(1, "key-pair", OWN)})
    # The colleague's role: not given a policy, passed to EC2, removed or re-tagged.
    theirs = "xeoncluster-t2-us-east-1"
    assert not may("iam", "PutRolePolicy", {"RoleName": theirs, "PolicyName": "p"})
    assert not may("iam", "DeleteRole", {"RoleName": theirs})
    assert not may("ec2", "RunInstances", launch(profile=theirs))
    assert may("ec2", "RunInstances", launch(profile="xeoncluster-t1-us-east-1"))
    assert not may("iam", "TagRole", {"RoleName": theirs, **owned()})
    assert not may("iam", "AddRoleToInstanceProfile", {"InstanceProfileName": theirs, "RoleName": theirs})
    assert not may("iam", "CreateRole", {"RoleName": "xeoncluster-x", "AssumeRolePolicyDocument": "{}",
                                         "PermissionsBoundary": BOUNDARY, **owned(COLLEAGUE)})


def test_the_user_launches_only_tagged_instances_from_ubuntu_or_own_images_in_own_groups():
    assert may("ec2", "RunInstances", launch())
    assert may("ec2", "RunInstances", launch(image="ami-baked"))
    assert not may("ec2", "RunInstances", launch(tagged=False))
    assert not may("ec2", "RunInstances", launch(image="ami-stranger"))
    assert not may("ec2", "RunInstances", launch(group="sg-prod"))


def test_the_escalation_path_is_closed_by_the_boundary():
    """Before: make a role with an admin policy, launch with it, read its credentials. Now every role
    the user can make or pass carries the boundary, and admin under the boundary is not admin."""
    assert not may("iam", "CreateRole", {"RoleName": "xeoncluster-x", "AssumeRolePolicyDocument": "{}", **owned()})
    assert not may("ec2", "RunInstances", launch(profile="ops-admin"))  # an existing role of another name
    # With the boundary all of it is allowed ...
    assert may("iam", "CreateRole", {"RoleName": "xeoncluster-x", "AssumeRolePolicyDocument": "{}",
                                     "PermissionsBoundary": BOUNDARY, **owned()})
    assert may("ec2", "RunInstances", launch(profile="xeoncluster-t1-us-east-1"))
    # ... but such a role, given an admin policy, can do no more than the boundary.
    capped = [boundary_document(ACCOUNT)]
    for question in (Question("iam:CreateUser", f"arn:aws:iam::{ACCOUNT}:user/x"),
                     Question("iam:AttachRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/xeoncluster-x"),
                     Question("iam:DeleteRolePermissionsBoundary", f"arn:aws:iam::{ACCOUNT}:role/xeoncluster-x"),
                     Question("s3:GetObject", "arn:aws:s3:::payroll/2026.csv", {"s3:ResourceAccount": [ACCOUNT]}),
                     Question("ec2:TerminateInstances", f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-prod"),
                     Question("ec2:CreateTags", f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-prod")):
        assert refusal([ADMIN], capped, question) is not None, question.action


def test_the_user_reaches_only_their_own_runs_in_the_account_s_own_run_buckets():
    ours, theirs = "/xeoncluster-123456789012-us-east-1", "/xeoncluster-999988887777-us-east-1"

    def user_may(method: str, path: str, query: str = "") -> bool:
        return all(allowed([USER], replace(q, context={"aws:userid": [ME], **q.context}))
                   for q in s3_questions(method, path, query, {}, b"", WORLD, ACCOUNT))

    for method in ("GET", "PUT", "DELETE"):
        assert user_may(method, f"{ours}/{ME}/t1/runs/r1/run.json"), method
        for path in (f"{ours}/{COLLEAGUE}/t1/runs/r1/run.json", f"{ours}/t1/runs/r1/run.json",
                     f"{theirs}/{ME}/t1/runs/r1/run.json", "/payroll/2026.csv"):
            assert not user_may(method, path), (method, path)
    assert user_may("GET", ours, f"list-type=2&prefix={ME}/t1/")
    assert user_may("GET", ours, "location=")
    for query in (f"list-type=2&prefix={COLLEAGUE}/", "list-type=2&prefix=", "list-type=2"):
        assert not user_may("GET", ours, query), query
    # Opening the shared bucket, or taking it over, is the administrator's.
    for query in ("policy=", "publicAccessBlock=", "ownershipControls="):
        assert not user_may("PUT", ours, query), query
        assert user_may("GET", ours, query), query
    assert not user_may("PUT", ours) and not user_may("PUT", "/xeoncluster-new-bucket")


def test_a_role_the_user_makes_with_an_admin_policy_reaches_only_its_owner_s_instances_and_runs():
    """The boundary ties every grant to the role's own owner tag; a role used anywhere but on an
    instance (its trust policy is the user's to write) is refused everything."""
    capped = [boundary_document(ACCOUNT)]
    bucket = "arn:aws:s3:::xeoncluster-123456789012-us-east-1"

    def role_may(question: Question, on_instance: bool = True) -> bool:
        context = {"aws:PrincipalTag/xeoncluster:owner": [ME], "s3:ResourceAccount": [ACCOUNT],
                   **({"aws:Ec2InstanceSourceVpc": ["vpc-1"]} if on_instance else {}), **question.context}
        return refusal([ADMIN], capped, replace(question, context=context)) is None

    instance = f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/"
    assert role_may(Question("ec2:TerminateInstances", instance + "i-own", {
        "ec2:ResourceTag/xeoncluster:owner": [ME], "ec2:ResourceTag/xeoncluster:cluster": ["t1"]}))
    assert not role_may(Question("ec2:TerminateInstances", instance + "i-t2", {
        "ec2:ResourceTag/xeoncluster:owner": [COLLEAGUE], "ec2:ResourceTag/xeoncluster:cluster": ["t2"]}))
    assert not role_may(Question("ec2:RunInstances", instance + "*", {
        "aws:RequestTag/xeoncluster:owner": [COLLEAGUE], "aws:RequestTag/xeoncluster:cluster": ["t2"]}))
    assert role_may(Question("ec2:RunInstances", instance + "*", {
        "aws:RequestTag/xeoncluster:owner": [ME], "aws:RequestTag/xeoncluster:cluster": ["t1"]}))
    assert role_may(Question("s3:GetObject", f"{bucket}/{ME}/t1/runs/r1/run.json"))
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert not role_may(Question(action, f"{bucket}/{COLLEAGUE}/t2/runs/r1/run.json")), action
    assert not role_may(Question("s3:ListBucket", bucket, {"s3:prefix": [f"{COLLEAGUE}/"]}))
    assert not role_may(Question("s3:PutBucketPolicy", bucket))
    # Assumed from anywhere else (another account, a laptop): nothing, not even its owner's runs.
    assert not role_may(Question("s3:GetObject", f"{bucket}/{ME}/t1/runs/r1/run.json"), on_instance=False)


def test_the_user_may_not_change_who_can_assume_a_role():
    assert not may("iam", "UpdateAssumeRolePolicy", {"RoleName": "xeoncluster-t1-us-east-1", "PolicyDocument": "{}"})
