"""The authorization questions an EC2 request asks, one per resource, with the condition keys of AWS's
Service Authorization Reference for EC2.

A creating call is asked on the new resource (`aws:RequestTag/...`, `aws:TagKeys`) and, for tags
given at creation, as CreateTags with `ec2:CreateAction`. A call on existing resources is asked on
each one, with its `ec2:ResourceTag/...` and the keys derived from it (`ec2:InstanceType`,
`ec2:Owner`, `ec2:Vpc`...). RunInstances is asked on everything it creates and uses, and as
`iam:PassRole` on the role of its instance profile. Every EC2 question carries `ec2:Region`.
Actions without resource-level permissions (Describe*) are asked on `*`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from xeoncluster.standin.iam_lookup import Lookup, TagsOf, as_lookup
from xeoncluster.standin.iam_params import numbered, request_tag_keys, resource_tag_keys, tag_specifications, tags
from xeoncluster.standin.iam_policy import Question, Values

# Resource types of EC2 ids, for ARNs built from an id alone (CreateTags, TerminateInstances).
ID_TYPES = {"i": "instance", "vol": "volume", "sg": "security-group", "subnet": "subnet", "ami": "image",
            "snap": "snapshot", "eni": "network-interface", "sir": "spot-instances-request", "key": "key-pair",
            "vpc": "vpc", "pg": "placement-group", "sgr": "security-group-rule"}
# Public images and snapshots have no account in their ARN.
NO_ACCOUNT = ("image", "snapshot")
# Calls on one existing resource, named by a parameter.
ON_ONE = {"GetConsoleOutput": ("instance", "InstanceId"), "GetConsoleScreenshot": ("instance", "InstanceId"),
          "ModifyInstanceAttribute": ("instance", "InstanceId"),
          "AuthorizeSecurityGroupIngress": ("security-group", "GroupId"),
          "AuthorizeSecurityGroupEgress": ("security-group", "GroupId"),
          "RevokeSecurityGroupIngress": ("security-group", "GroupId"),
          "RevokeSecurityGroupEgress": ("security-group", "GroupId"),
          "DeleteSecurityGroup": ("security-group", "GroupId"), "DeleteKeyPair": ("key-pair", "KeyName"),
          "DeletePlacementGroup": ("placement-group", "GroupName"), "ModifyVolume": ("volume", "VolumeId"),
          "DeleteVolume": ("volume", "VolumeId"), "DeregisterImage": ("image", "ImageId"),
          "DeleteSnapshot": ("snapshot", "SnapshotId")}
# What names the resource when the usual parameter is absent (a group by name in the default VPC).
ALTERNATE_NAMES = {"KeyName": "KeyPairId", "GroupId": "GroupName"}
# Calls on a list of existing resources (`InstanceId.N`), asked once per resource.
ON_EACH = {"TerminateInstances": ("instance", "InstanceId"), "StopInstances": ("instance", "InstanceId"),
           "StartInstances": ("instance", "InstanceId"), "RebootInstances": ("instance", "InstanceId"),
           "CancelSpotInstanceRequests": ("spot-instances-request", "SpotInstanceRequestId")}
# Calls that create one resource (named by a parameter, or `*` while its id is unknown).
CREATES = {"CreateSecurityGroup": ("security-group", ""), "ImportKeyPair": ("key-pair", "KeyName"),
           "CreateKeyPair": ("key-pair", "KeyName"), "CreatePlacementGroup": ("placement-group", "GroupName")}
# What a parameter of a creating call says about the new resource, as a condition key.
CREATE_KEYS = {"Strategy": "ec2:PlacementGroupStrategy", "KeyType": "ec2:KeyPairType"}
EC2_SERVICE = "ec2.amazonaws.com"


@dataclass(frozen=True)
class Ec2Request:
    action: str
    params: Mapping[str, str]
    region: str
    account: str
    lookup: Lookup

    def arn(self, kind: str, name: str) -> str:
        owner = "" if kind in NO_ACCOUNT else self.account
        return f"arn:aws:ec2:{self.region}:{owner}:{kind}/{name}"

    def existing(self, action: str, kind: str, ref: str, extra: Mapping[str, Values] | None = None) -> Question:
        context = {**resource_tag_keys(self.lookup.tags(kind, ref), "ec2"), **self.lookup.keys(kind, ref),
                   **(extra or {})}
        return Question(action, self.arn(kind, ref), context)

    def created(self, kind: str, name: str, keys: Mapping[str, Values] | None = None) -> Question:
        request_tags = tag_specifications(self.params).get(kind, {})
        return Question(f"ec2:{self.action}", self.arn(kind, name), {**(keys or {}), **request_tag_keys(request_tags)})

    def tag_on_create(self) -> list[Question]:
        """Tags given with a creating call are authorized as CreateTags, with ec2:CreateAction."""
        return [Question("ec2:CreateTags", self.arn(kind, "*"), {"ec2:CreateAction": [self.action],
                                                                 **request_tag_keys(found)})
                for kind, found in tag_specifications(self.params).items() if found]


def ec2_questions(action: str, params: Mapping[str, str], region: str, account: str,
                  lookup: Lookup | TagsOf) -> list[Question]:
    request = Ec2Request(action, params, region, account, as_lookup(lookup))
    questions = _questions(request)
    return [replace(q, context={"ec2:Region": [region], **q.context}) if q.action.startswith("ec2:") else q
            for q in questions]


def _questions(request: Ec2Request) -> list[Question]:
    action, params = request.action, request.params
    if action in _BUILDERS:
        return _BUILDERS[action](request)
    if action in ON_ONE:
        kind, name = ON_ONE[action]
        ref = params.get(name) or params.get(ALTERNATE_NAMES.get(name, name), "*")
        return [request.existing(f"ec2:{action}", kind, ref), *_tagged_on_the_side(request)]
    if action in ON_EACH:
        kind, name = ON_EACH[action]
        return [request.existing(f"ec2:{action}", kind, ref) for ref in numbered(params, name)]
    if action in CREATES:
        return _create_one(request)
    return [Question(f"ec2:{action}", "*")]


def _tagged_on_the_side(request: Ec2Request) -> list[Question]:
    """Rules created by Authorize* with tags (`security-group-rule`) are new resources of their own."""
    kinds = [kind for kind, found in tag_specifications(request.params).items() if found]
    return [request.created(kind, "*") for kind in kinds] + request.tag_on_create()


def _create_one(request: Ec2Request) -> list[Question]:
    kind, name_param = CREATES[request.action]
    name = request.params.get(name_param, "*") if name_param else "*"
    keys = {key: [request.params[p]] for p, key in CREATE_KEYS.items() if p in request.params}
    questions = [request.created(kind, name, keys)]
    if request.action == "CreateSecurityGroup":
        questions.append(request.existing("ec2:CreateSecurityGroup", "vpc", request.params.get("VpcId", "*")))
    return questions + request.tag_on_create()


def _tagging(request: Ec2Request) -> list[Question]:
    """CreateTags/DeleteTags called by name, on existing resources: no ec2:CreateAction."""
    asked = tags(request.params, "Tag")
    keys = request_tag_keys(asked) if request.action == "CreateTags" else {"aws:TagKeys": list(asked)}
    return [request.existing(f"ec2:{request.action}", _kind_of(ref), ref, keys)
            for ref in numbered(request.params, "ResourceId")]


def _kind_of(resource_id: str) -> str:
    return ID_TYPES.get(resource_id.split("-", 1)[0], "resource")


def _create_image(request: Ec2Request) -> list[Question]:
    """CreateImage is asked on the instance it images and on the new image and its snapshots."""
    instance = request.existing("ec2:CreateImage", "instance", request.params.get("InstanceId", "*"))
    return [instance, request.created("image", "*"), request.created("snapshot", "*"), *request.tag_on_create()]


def _run_instances(request: Ec2Request) -> list[Question]:
    params = request.params
    subnet = params.get("SubnetId") or params.get("NetworkInterface.1.SubnetId")
    zone = params.get("Placement.AvailabilityZone") or _first(request.lookup.keys("subnet", subnet or ""),
                                                              "ec2:AvailabilityZone")
    created: dict[str, Mapping[str, Values]] = {
        "instance": _instance_keys(request, zone), "volume": _volume_keys(params, zone),
        "network-interface": _interface_keys(request, subnet, zone)}
    if params.get("InstanceMarketOptions.MarketType") == "spot":
        created["spot-instances-request"] = {}
    questions = [request.created(kind, "*", keys) for kind, keys in created.items()]
    questions += request.tag_on_create()
    questions += [request.existing("ec2:RunInstances", kind, ref) for kind, ref in _used(params)]
    return questions + _pass_role(request)


def _instance_keys(request: Ec2Request, zone: str | None) -> dict[str, Values]:
    params = request.params
    keys: dict[str, Values] = {
        "ec2:InstanceType": [params.get("InstanceType", "m1.small")],
        "ec2:InstanceMarketType": [params.get("InstanceMarketOptions.MarketType", "on-demand")],
        "ec2:Tenancy": [params.get("Placement.Tenancy", "default")],
        "ec2:MetadataHttpTokens": [params.get("MetadataOptions.HttpTokens", "optional")],
        "ec2:MetadataHttpEndpoint": [params.get("MetadataOptions.HttpEndpoint", "enabled")],
        "ec2:MetadataHttpPutResponseHopLimit": [params.get("MetadataOptions.HttpPutResponseHopLimit", "1")]}
    if zone:
        keys["ec2:AvailabilityZone"] = [zone]
    profile = _profile(params)
    if profile:
        keys["ec2:InstanceProfile"] = [profile if profile.startswith("arn:")
                                       else f"arn:aws:iam::{request.account}:instance-profile/{profile}"]
    if "Placement.GroupName" in params:
        keys["ec2:PlacementGroup"] = [request.arn("placement-group", params["Placement.GroupName"])]
    return keys


def _volume_keys(params: Mapping[str, str], zone: str | None) -> dict[str, Values]:
    names = {"VolumeSize": "ec2:VolumeSize", "VolumeType": "ec2:VolumeType", "Encrypted": "ec2:Encrypted",
             "Iops": "ec2:VolumeIops", "Throughput": "ec2:VolumeThroughput"}
    keys: dict[str, Values] = {key: [params[f"BlockDeviceMapping.1.Ebs.{name}"]] for name, key in names.items()
                               if f"BlockDeviceMapping.1.Ebs.{name}" in params}
    return keys | ({"ec2:AvailabilityZone": [zone]} if zone else {})


def _interface_keys(request: Ec2Request, subnet: str | None, zone: str | None) -> dict[str, Values]:
    keys: dict[str, Values] = {}
    if subnet:
        keys["ec2:Subnet"] = [request.arn("subnet", subnet)]
        keys |= {k: v for k, v in request.lookup.keys("subnet", subnet).items() if k == "ec2:Vpc"}
    if zone:
        keys["ec2:AvailabilityZone"] = [zone]
    public = request.params.get("NetworkInterface.1.AssociatePublicIpAddress")
    return keys | ({"ec2:AssociatePublicIpAddress": [public]} if public else {})


def _used(params: Mapping[str, str]) -> list[tuple[str, str]]:
    """The existing resources a launch uses: (kind, id or name)."""
    subnets = [params[k] for k in ("SubnetId", "NetworkInterface.1.SubnetId") if k in params]
    groups = numbered(params, "SecurityGroupId") + numbered(params, "NetworkInterface.1.SecurityGroupId")
    used = [("subnet", s) for s in subnets] + [("security-group", g) for g in groups]
    used.append(("image", params.get("ImageId", "")))
    if "KeyName" in params:
        used.append(("key-pair", params["KeyName"]))
    if "Placement.GroupName" in params:
        used.append(("placement-group", params["Placement.GroupName"]))
    return used


def _profile(params: Mapping[str, str]) -> str | None:
    return params.get("IamInstanceProfile.Arn") or params.get("IamInstanceProfile.Name")


def _pass_role(request: Ec2Request) -> list[Question]:
    """Launching with an instance profile passes its role to EC2 (asked with the role's tags)."""
    profile = _profile(request.params)
    role = request.lookup.profile_role(profile) if profile else None
    if role is None:
        return []
    facts = request.lookup.role(role.rsplit("/", 1)[-1])
    return [Question("iam:PassRole", role, {"iam:PassedToService": [EC2_SERVICE],
                                            **resource_tag_keys(facts.tags if facts else {}, "iam"),
                                            "iam:AssociatedResourceArn": [request.arn("instance", "*")]})]


def _first(keys: Mapping[str, Values], name: str) -> str | None:
    values = keys.get(name)
    return values[0] if values else None


_BUILDERS: dict[str, Callable[[Ec2Request], list[Question]]] = {
    "RunInstances": _run_instances, "CreateImage": _create_image, "CreateTags": _tagging, "DeleteTags": _tagging}
