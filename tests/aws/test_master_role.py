"""The cluster's role: `up` makes it (and an instance profile) for every node, scoped to the cluster
and capped by the account's permissions boundary; `down` and a rolled-back `up` remove it. What the
policy allows is checked with the stand-in's evaluator, which (unlike moto) evaluates conditions: its
own instances yes, another cluster's no; tags at launch only, the cluster's instance types and
subnets only; passing only itself, only to EC2."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from aws_helpers import PUBLIC_KEY, UBUNTU_AMI, cluster_config, instances

from xeoncluster.providers.aws.boundary import boundary_document
from xeoncluster.providers.aws.role import RoleScope, master_policy
from xeoncluster.providers.base import LaunchRequest, Role
from xeoncluster.standin.iam_lookup import Lookup, RoleFacts
from xeoncluster.standin.iam_policy import EXPLICIT_DENY_BOUNDARY, EXPLICIT_DENY_IDENTITY, Question, allowed, refusal
from xeoncluster.standin.iam_requests import ec2_questions
from xeoncluster.standin.moto_lookup import MotoLookup

ROLE = "xeoncluster-t1-us-east-1"


def role_policy(iam) -> dict:
    return iam.get_role_policy(RoleName=ROLE, PolicyName="xeoncluster-agent")["PolicyDocument"]


def test_up_gives_every_node_the_role_scoped_to_the_cluster_and_down_removes_it(xc, ec2, aws):
    """Workers carry it too, so the agent may run on any node (the user's code runs on every node anyway)."""
    import boto3

    iam = boto3.client("iam", region_name="us-east-1")
    assert xc("up", "--name", "t1", "--nodes", "3").code == 0
    profiles = {(next(t["Value"] for t in i["Tags"] if t["Key"] == "xeoncluster:role"),
                 i.get("IamInstanceProfile", {}).get("Arn", "")) for i in instances(ec2)}
    assert profiles == {("master", f"arn:aws:iam::123456789012:instance-profile/{ROLE}"),
                        ("worker", f"arn:aws:iam::123456789012:instance-profile/{ROLE}")}
    assert len(instances(ec2)) == 3
    trust = iam.get_role(RoleName=ROLE)["Role"]["AssumeRolePolicyDocument"]
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    text = json.dumps(role_policy(iam))
    assert '"aws:RequestTag/xeoncluster:cluster": "t1"' in text
    assert '"ec2:ResourceTag/xeoncluster:cluster": "t1"' in text
    owner = boto3.client("sts").get_caller_identity()["UserId"]
    assert f'"aws:RequestTag/xeoncluster:owner": "{owner}"' in text
    assert {"Key": "xeoncluster:owner", "Value": owner} in iam.get_role(RoleName=ROLE)["Role"]["Tags"]
    assert '"Resource": "*"' in text  # only for the Describe calls and GetConsoleOutput
    assert xc("down", "--name", "t1").code == 0
    for call in (lambda: iam.get_role(RoleName=ROLE), lambda: iam.get_instance_profile(InstanceProfileName=ROLE)):
        with pytest.raises(iam.exceptions.NoSuchEntityException):
            call()


def test_the_run_agent_s_launches_carry_the_cluster_s_profile_without_asking_iam(provider, ec2, aws) -> None:
    """After act_for the provider runs as the agent, whose role may not read IAM (moto's credentials
    may: IAM refuses it here as it would the role). Replacement workers and a successor master carry
    the profile, so that the agent on any of them can launch the next."""
    cluster = cluster_config(nodes=3)
    provider.prepare(cluster, PUBLIC_KEY)
    provider.prepare_agent_access(cluster, None, None, None)
    provider.act_for(OWNER)
    aws.clear()
    aws.fail("GetInstanceProfile", "AccessDenied", times=99)
    launched = [*provider.launch(LaunchRequest(cluster, 2, None, Role.WORKER, 1, base=UBUNTU_AMI)),
                *provider.launch(LaunchRequest(cluster, 1, None, Role.MASTER, 0, base=UBUNTU_AMI))]
    assert aws.ops("iam") == [] and len(launched) == 3
    profiles = {i["InstanceId"]: i.get("IamInstanceProfile", {}).get("Arn") for i in instances(ec2)}
    assert profiles == {n.id: f"arn:aws:iam::123456789012:instance-profile/{ROLE}" for n in launched}
    runs = [params for service, op, params in aws.calls if op == "RunInstances"]
    assert [r["IamInstanceProfile"] for r in runs] == [{"Name": ROLE}] * 2


def test_a_launch_names_no_profile_where_up_made_none(provider, ec2) -> None:
    """A provider used on its own (no role): its launches carry none, and still succeed."""
    cluster = cluster_config(nodes=2)
    provider.prepare(cluster, PUBLIC_KEY)
    provider.launch(LaunchRequest(cluster, 1, None, Role.WORKER, 1))
    assert ["IamInstanceProfile" in i for i in instances(ec2)] == [False]


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


OWNER = "AIDAEXAMPLEUSERME0001"  # the UserId of the user who made the cluster
SCOPE = RoleScope("a", "us-east-1", "123456789012", "sg-0aaaaaaaaaaaaaaaa", ("subnet-0aaaaaaaaaaaaaaaa",),
                  "ami-0bbbbbbbbbbbbbbbb", "k" * 64, instance_types=("c7i.2xlarge", "c7i.4xlarge"), owner=OWNER)


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


def run_params(cluster: str, image: str = "ami-0bbbbbbbbbbbbbbbb", group: str = "sg-0aaaaaaaaaaaaaaaa",
               instance_type: str = "c7i.2xlarge", subnet: str = "subnet-0aaaaaaaaaaaaaaaa",
               tags: dict[str, str | None] | None = None) -> dict:
    params = {"ImageId": image, "InstanceType": instance_type, "KeyName": "xeoncluster-a",
              "NetworkInterface.1.SubnetId": subnet, "NetworkInterface.1.SecurityGroupId.1": group,
              "InstanceMarketOptions.MarketType": "spot"}
    every = {"xeoncluster:cluster": cluster, "xeoncluster:role": "worker", "xeoncluster:owner": OWNER,
             "Name": f"{cluster}-node1"} | (tags or {})
    every = {k: v for k, v in every.items() if v is not None}
    for index, kind in enumerate(("instance", "volume", "spot-instances-request"), start=1):
        params[f"TagSpecification.{index}.ResourceType"] = kind
        for number, (key, value) in enumerate(every.items(), start=1):
            params |= {f"TagSpecification.{index}.Tag.{number}.Key": key,
                       f"TagSpecification.{index}.Tag.{number}.Value": value}
    return params


COLLEAGUE = "AIDAEXAMPLECOLLEAGUE1"
IMAGES = {"ami-0ccccccccccccccc": {"xeoncluster:image-key": "k" * 64, "xeoncluster:owner": OWNER},
          "ami-0dddddddddddddddd": {"xeoncluster:image-key": "other", "xeoncluster:owner": OWNER},
          # A colleague's image tagged with this cluster's key: the key is the same for every user.
          "ami-0eeeeeeeeeeeeeeee": {"xeoncluster:image-key": "k" * 64, "xeoncluster:owner": COLLEAGUE}}


def test_the_role_launches_only_tagged_instances_with_its_own_network_and_images() -> None:
    assert all(ask("RunInstances", run_params("a"), IMAGES))
    assert all(ask("RunInstances", run_params("a", image="ami-0ccccccccccccccc"), IMAGES))  # baked for this key
    assert not all(ask("RunInstances", run_params("b"), IMAGES))          # another cluster's tag
    assert not all(ask("RunInstances", run_params("a", image="ami-0dddddddddddddddd"), IMAGES))
    assert not all(ask("RunInstances", run_params("a", image="ami-0eeeeeeeeeeeeeeee"), IMAGES))
    assert not all(ask("RunInstances", run_params("a", group="sg-0eeeeeeeeeeeeeeee"), IMAGES))


def test_the_boundary_lets_a_role_launch_ubuntu_its_owner_s_images_and_its_base_never_a_colleague_s() -> None:
    """Whatever policy a role is given: an image whose owner tag is another user's is refused, whatever key
    it carries, unless the role's own tag names it as its base (`image:` names it: how users share one)."""
    boundary, admin = [boundary_document("123456789012")], [{"Statement": [
        {"Effect": "Allow", "Action": "*", "Resource": "*"}]}]
    owners = {"ami-0ccccccccccccccc": "123456789012", "ami-0eeeeeeeeeeeeeeee": "123456789012",
              "ami-0bbbbbbbbbbbbbbbb": "099720109477"}

    class Images(Lookup):
        def tags(self, kind: str, ref: str) -> dict[str, str]:
            return IMAGES.get(ref, {}) if kind == "image" else {}

        def keys(self, kind: str, ref: str) -> dict[str, list[str]]:
            return {"ec2:Owner": [owners[ref]]} if kind == "image" and ref in owners else {}

    def image_question(image: str, base: str | None = None) -> Question:
        [question] = [q for q in ec2_questions("RunInstances", run_params("a", image=image), "us-east-1",
                                               "123456789012", Images()) if ":image/" in q.resource]
        [asked] = on_the_master([question], OWNER)
        return replace(asked, context={**asked.context, **(
            {"aws:PrincipalTag/xeoncluster:base-image": [base]} if base else {})})

    assert refusal(admin, boundary, image_question("ami-0bbbbbbbbbbbbbbbb")) is None       # Canonical's Ubuntu
    assert refusal(admin, boundary, image_question("ami-0ccccccccccccccc")) is None       # the owner's own bake
    assert refusal(admin, boundary, image_question("ami-0eeeeeeeeeeeeeeee")) is not None  # a colleague's, our key
    assert refusal(admin, boundary, image_question("ami-0eeeeeeeeeeeeeeee", base="ami-0eeeeeeeeeeeeeeee")) is None
    assert refusal(admin, boundary, image_question("ami-0eeeeeeeeeeeeeeee", base="ami-0ccccccccccccccc")) is not None


def test_the_role_tags_nothing_after_launch() -> None:
    """It could once retag its own instances (say, into another cluster): nothing calls that."""
    tags = {"i-own": {"xeoncluster:cluster": "a"}}
    assert ask("CreateTags", {"ResourceId.1": "i-own", "Tag.1.Key": "xeoncluster:cluster", "Tag.1.Value": "b"},
               tags) == [False]
    assert ask("CreateTags", {"ResourceId.1": "i-own", "Tag.1.Key": "Name", "Tag.1.Value": "x"}, tags) == [False]


def test_the_role_launches_only_the_cluster_s_instance_types_with_the_tool_s_tag_keys() -> None:
    assert all(ask("RunInstances", run_params("a", instance_type="c7i.4xlarge"), {}))  # the fallback type
    assert not all(ask("RunInstances", run_params("a", instance_type="p5.48xlarge"), {}))
    assert all(ask("RunInstances", run_params("a", tags={"xeoncluster:index-base": "3"}), {}))
    assert not all(ask("RunInstances", run_params("a", tags={"team": "ml"}), {}))


def test_the_role_launches_only_for_the_user_who_made_the_cluster() -> None:
    """What the agent launches carries the owner `up` recorded, so that user (and only that user) may
    remove it; never the role session's own id, nor another user's."""
    assert all(ask("RunInstances", run_params("a"), {}))
    assert not all(ask("RunInstances", run_params("a", tags={"xeoncluster:owner": "AROAROLE:i-0123"}), {}))
    assert not all(ask("RunInstances", run_params("a", tags={"xeoncluster:owner": None}), {}))


def test_the_role_reads_the_console_of_its_own_cluster_s_instances_only() -> None:
    tags = {"i-own": {"xeoncluster:cluster": "a"}, "i-other": {"xeoncluster:cluster": "b"}, "i-bare": {}}
    assert ask("GetConsoleOutput", {"InstanceId": "i-own", "Latest": "true"}, tags) == [True]
    assert ask("GetConsoleOutput", {"InstanceId": "i-other", "Latest": "true"}, tags) == [False]
    assert ask("GetConsoleOutput", {"InstanceId": "i-bare", "Latest": "true"}, tags) == [False]


def test_the_role_puts_network_interfaces_only_in_the_cluster_s_subnets() -> None:
    def interface_allowed(subnet: str) -> bool:
        questions = ec2_questions("RunInstances", run_params("a", subnet=subnet), "us-east-1", "123456789012",
                                  lambda rid: {})
        [interface] = [q for q in questions if q.resource.endswith(":network-interface/*")]
        return allowed([master_policy(SCOPE)], interface)

    assert interface_allowed("subnet-0aaaaaaaaaaaaaaaa")
    assert not interface_allowed("subnet-0fffffffffffffff0")


class Profiles(Lookup):
    """Every profile holds the role of its name. Every role is OWNER's but `xeoncluster-b-us-east-1`,
    a colleague's cluster's."""

    def profile_role(self, profile: str) -> str | None:
        return f"arn:aws:iam::123456789012:role/{profile}"

    def role(self, name: str) -> RoleFacts | None:
        owner = "AIDAEXAMPLECOLLEAGUE1" if name == "xeoncluster-b-us-east-1" else OWNER
        return RoleFacts(f"arn:aws:iam::123456789012:role/{name}", tags={"xeoncluster:owner": owner})


def pass_role(profile: str, service: str = "ec2.amazonaws.com") -> Question:
    """The PassRole question of a launch of cluster a's worker with `profile`, as the gate asks it."""
    params = run_params("a") | {"IamInstanceProfile.Name": profile}
    [question] = [q for q in ec2_questions("RunInstances", params, "us-east-1", "123456789012", Profiles())
                  if q.action == "iam:PassRole"]
    return replace(question, context={**question.context, "iam:PassedToService": [service]})


def test_the_role_passes_only_itself_and_only_to_ec2() -> None:
    """The agent, on whichever node it runs, launches nodes that carry the cluster's role: itself."""
    role = [master_policy(SCOPE)]
    assert allowed(role, pass_role("xeoncluster-a-us-east-1"))
    assert not allowed(role, pass_role("xeoncluster-a-us-east-1", service="lambda.amazonaws.com"))
    for other in ("xeoncluster-b-us-east-1", "xeoncluster-a-eu-west-1", "xeoncluster-ab-us-east-1", "ops-admin"):
        assert not allowed(role, pass_role(other)), other
    params = run_params("a") | {"IamInstanceProfile.Name": "xeoncluster-a-us-east-1"}
    questions = ec2_questions("RunInstances", params, "us-east-1", "123456789012", Profiles())
    assert all(allowed(role, q) for q in questions) and len(questions) > len(ask("RunInstances", run_params("a"), {}))


def test_the_boundary_lets_a_role_pass_only_its_owner_s_xeoncluster_roles_to_ec2() -> None:
    """Whatever policy a role is given, it may hand EC2 no role but one of its own owner's."""
    boundary, admin = [boundary_document("123456789012")], [{"Statement": [
        {"Effect": "Allow", "Action": "*", "Resource": "*"}]}]

    def on_a_node(question: Question) -> Question:
        [asked] = on_the_master([question], OWNER)
        return asked

    assert refusal([master_policy(SCOPE)], boundary, on_a_node(pass_role("xeoncluster-a-us-east-1"))) is None
    assert refusal(admin, boundary, on_a_node(pass_role("xeoncluster-a-eu-west-1"))) is None  # the owner's own
    for refused in (pass_role("xeoncluster-b-us-east-1"), pass_role("ops-admin"),
                    pass_role("xeoncluster-a-us-east-1", service="lambda.amazonaws.com")):
        assert refusal(admin, boundary, on_a_node(refused)) is not None, refused
    assert refusal([master_policy(SCOPE)], boundary, pass_role("xeoncluster-a-us-east-1")) is not None  # off a node


def test_the_role_carries_the_boundary_and_can_launch_what_up_launched(xc, aws) -> None:
    """Under its boundary, the role may make the very launch `up` made for the workers (a replacement)."""
    import boto3

    from xeoncluster.providers.aws.boundary import boundary_arn

    iam = boto3.client("iam", region_name="us-east-1")
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    role = iam.get_role(RoleName=ROLE)["Role"]
    assert role["PermissionsBoundary"]["PermissionsBoundaryArn"] == boundary_arn("123456789012")
    [launch] = [params for service, op, params in aws.calls if op == "RunInstances"
                and {"Key": "xeoncluster:role", "Value": "worker"} in params["TagSpecifications"][0]["Tags"]]
    arn = boundary_arn("123456789012")
    version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
    boundary = iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]["Document"]
    owner = next(t["Value"] for t in role["Tags"] if t["Key"] == "xeoncluster:owner")
    questions = on_the_master(ec2_questions("RunInstances", query_form("RunInstances", launch), "us-east-1",
                                            "123456789012", MotoLookup("us-east-1")), owner)
    assert len(questions) >= 9  # what it creates, tags and uses (network, key, image)
    assert [(q, why) for q in questions if (why := refusal([role_policy(iam)], [boundary], q))] == []
    bigger = query_form("RunInstances", launch | {"InstanceType": "p5.48xlarge"})
    assert any(refusal([role_policy(iam)], [boundary], q) for q in on_the_master(ec2_questions(
        "RunInstances", bigger, "us-east-1", "123456789012", MotoLookup("us-east-1")), owner))
    # The same role assumed by anything but EC2 (its trust policy is the user's to write): refused.
    assert all(refusal([role_policy(iam)], [boundary], replace(
        q, context={k: v for k, v in q.context.items() if k != "aws:Ec2InstanceSourceVpc"})) for q in questions)


def on_the_master(questions: list[Question], owner: str) -> list[Question]:
    """As the gate asks them for the master's session: the role's owner tag, and the VPC its instance
    credentials went to."""
    return [replace(q, context={**q.context, "aws:PrincipalTag/xeoncluster:owner": [owner],
                                "aws:Ec2InstanceSourceVpc": ["vpc-master"]}) for q in questions]


def query_form(operation: str, params: dict) -> dict[str, str]:
    """A boto3 call's parameters as the EC2 query request carries them (what the stand-in's gate reads)."""
    import botocore.session
    from botocore.serialize import create_serializer

    model = botocore.session.get_session().get_service_model("ec2").operation_model(operation)
    return {k: str(v) for k, v in create_serializer("ec2").serialize_to_request(params, model)["body"].items()}


def test_a_role_made_before_the_boundary_gets_it_on_the_next_up(xc, aws) -> None:
    import boto3

    from xeoncluster.providers.aws.role import TRUST

    iam = boto3.client("iam", region_name="us-east-1")
    iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(TRUST))
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    assert iam.get_role(RoleName=ROLE)["Role"]["PermissionsBoundary"]["PermissionsBoundaryArn"].endswith(
        ":policy/xeoncluster-boundary")


def through(questions: list[Question], vpc: str | None, address: str | None) -> list[Question]:
    """As AWS asks them of instance credentials delivered to vpc-master at 10.0.0.5: it sets those two keys
    wherever the credentials are used, and aws:SourceVpc / aws:VpcSourceIp only through a VPC endpoint."""
    keys = {"aws:Ec2InstanceSourcePrivateIPv4": ["10.0.0.5"], **({"aws:SourceVpc": [vpc]} if vpc else {}),
            **({"aws:VpcSourceIp": [address]} if address else {})}
    return [replace(q, context={**q.context, **keys}) for q in on_the_master(questions, OWNER)]


def test_the_boundary_binds_instance_credentials_to_their_instance_through_an_endpoint() -> None:
    """Copied off the node, the credentials still carry the instance's keys. Through an endpoint of another
    VPC, or from another address through this one, the boundary refuses them; with no endpoint at all AWS
    cannot tell, and the role's credentials work until they expire (docs/aws.md says so)."""
    boundary, role = [boundary_document("123456789012")], [master_policy(SCOPE)]
    launch = ec2_questions("RunInstances", run_params("a"), "us-east-1", "123456789012", lambda rid: {})
    [launched] = [q for q in launch if q.action == "ec2:RunInstances" and q.resource.endswith(":instance/*")]
    assert refusal(role, boundary, *through([launched], "vpc-master", "10.0.0.5")) is None
    assert refusal(role, boundary, *through([launched], None, None)) is None  # AWS as it is: no endpoint
    for vpc, address in (("vpc-thief", "10.0.0.5"), ("vpc-master", "10.0.0.99"), ("vpc-thief", None)):
        assert refusal(role, boundary, *through([launched], vpc, address)) == EXPLICIT_DENY_BOUNDARY, (vpc, address)


def test_where_every_s3_call_goes_through_an_endpoint_the_role_refuses_one_that_did_not() -> None:
    """The cluster's subnets route S3 through the VPC's gateway endpoint (endpoints.py): a call that came
    through no endpoint was made with credentials copied off a node."""
    bound = [master_policy(replace(SCOPE, storage=("xeoncluster-b", "o/a"), through_endpoints=("s3",)))]
    get = Question("s3:GetObject", "arn:aws:s3:::xeoncluster-b/o/a/runs/r/run.json",
                   {"s3:ResourceAccount": ["123456789012"]})
    [on_node] = through([get], "vpc-master", "10.0.0.5")
    [elsewhere] = through([get], None, None)
    assert refusal(bound, None, on_node) is None and refusal(bound, None, elsewhere) == EXPLICIT_DENY_IDENTITY
    unbound = [master_policy(replace(SCOPE, storage=("xeoncluster-b", "o/a")))]
    assert refusal(unbound, None, elsewhere) is None
