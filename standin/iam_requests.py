"""The authorization questions an EC2 or S3 request asks, one per resource, with its condition keys.

EC2 authorizes RunInstances once per resource it touches (the instance and volumes it creates,
the subnet, security group, image and key pair it uses) and tags given at creation as CreateTags
with `ec2:CreateAction`; TerminateInstances and CreateTags once per instance, with that instance's
`ec2:ResourceTag/...` keys. S3 authorizes objects by `arn:aws:s3:::BUCKET/KEY` and listing by the
bucket with the `s3:prefix` key. Actions without resource-level permissions use `*`.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from html import unescape
from urllib.parse import parse_qs, unquote

from .iam_policy import Question, Values

TagsOf = Callable[[str], Mapping[str, str]]
# Resource types of EC2 ids, for ARNs built from an id alone (CreateTags, TerminateInstances).
ID_TYPES = {"i": "instance", "vol": "volume", "sg": "security-group", "subnet": "subnet", "ami": "image",
            "snap": "snapshot", "eni": "network-interface", "sir": "spot-instances-request", "key": "key-pair"}
_INDEXED = re.compile(r"^(.*?)\.(\d+)(?:\.(.*))?$")


def ec2_questions(action: str, params: Mapping[str, str], region: str, account: str,
                  tags_of: TagsOf) -> list[Question]:
    arn = _Arns(region, account)
    if action == "RunInstances":
        return _run_instances(params, arn, tags_of)
    if action in ("TerminateInstances", "GetConsoleOutput", "StopInstances", "StartInstances", "RebootInstances"):
        ids = _numbered(params, "InstanceId") or [params.get("InstanceId", "")]
        return [_on_existing(f"ec2:{action}", arn.of_id(i), tags_of(i)) for i in ids if i]
    if action == "CreateTags":
        request_tags = _tags(params, "Tag")
        return [_on_existing("ec2:CreateTags", arn.of_id(i), tags_of(i), request_tags)
                for i in _numbered(params, "ResourceId")]
    return [Question(f"ec2:{action}", "*")]


class _Arns:
    def __init__(self, region: str, account: str) -> None:
        self.region, self.account = region, account

    def of(self, kind: str, name: str) -> str:
        owner = "" if kind in ("image", "snapshot") else self.account  # public images have no owner part
        return f"arn:aws:ec2:{self.region}:{owner}:{kind}/{name}"

    def of_id(self, resource_id: str) -> str:
        return self.of(ID_TYPES.get(resource_id.split("-", 1)[0], "resource"), resource_id)


def _run_instances(params: Mapping[str, str], arn: _Arns, tags_of: TagsOf) -> list[Question]:
    specs = _tag_specifications(params)
    created = ["instance", "volume", "network-interface"]
    if params.get("InstanceMarketOptions.MarketType") == "spot":
        created.append("spot-instances-request")
    context = {"ec2:InstanceType": [params.get("InstanceType", "")]}
    questions = [Question("ec2:RunInstances", arn.of(kind, "*"), {**context, **_request_tag_keys(specs.get(kind, {}))})
                 for kind in created]
    questions += [Question("ec2:CreateTags", arn.of(kind, "*"),
                           {"ec2:CreateAction": ["RunInstances"], **_request_tag_keys(tags)})
                  for kind, tags in specs.items()]
    used = _used_resources(params, arn)
    questions += [_on_existing("ec2:RunInstances", resource, tags_of(resource.rsplit("/", 1)[1]))
                  for resource in used]
    return questions


def _used_resources(params: Mapping[str, str], arn: _Arns) -> list[str]:
    subnets = [params[k] for k in ("SubnetId", "NetworkInterface.1.SubnetId") if k in params]
    groups = _numbered(params, "SecurityGroupId") + _numbered(params, "NetworkInterface.1.SecurityGroupId")
    used = [arn.of("subnet", s) for s in subnets] + [arn.of("security-group", g) for g in groups]
    used.append(arn.of("image", params.get("ImageId", "")))
    if "KeyName" in params:
        used.append(arn.of("key-pair", params["KeyName"]))
    if "Placement.GroupName" in params:
        used.append(arn.of("placement-group", params["Placement.GroupName"]))
    return used


def _on_existing(action: str, resource: str, tags: Mapping[str, str],
                 request_tags: Mapping[str, str] | None = None) -> Question:
    context: dict[str, Values] = {f"ec2:ResourceTag/{k}": [v] for k, v in tags.items()}
    context |= {f"aws:ResourceTag/{k}": [v] for k, v in tags.items()}
    if request_tags:
        context |= _request_tag_keys(request_tags)
    return Question(action, resource, context)


def _request_tag_keys(tags: Mapping[str, str]) -> dict[str, Values]:
    keys: dict[str, Values] = {f"aws:RequestTag/{k}": [v] for k, v in tags.items()}
    if tags:
        keys["aws:TagKeys"] = list(tags)
    return keys


def _tag_specifications(params: Mapping[str, str]) -> dict[str, dict[str, str]]:
    specs: dict[str, dict[str, str]] = {}
    for index in sorted({m.group(2) for k in params if (m := _INDEXED.match(k)) and m.group(1) == "TagSpecification"}):
        prefix = f"TagSpecification.{index}"
        specs[params.get(f"{prefix}.ResourceType", "")] = _tags(params, f"{prefix}.Tag")
    return specs


def _tags(params: Mapping[str, str], prefix: str) -> dict[str, str]:
    tags, index = {}, 1
    while f"{prefix}.{index}.Key" in params:
        tags[params[f"{prefix}.{index}.Key"]] = params.get(f"{prefix}.{index}.Value", "")
        index += 1
    return tags


def _numbered(params: Mapping[str, str], prefix: str) -> list[str]:
    values, index = [], 1
    while f"{prefix}.{index}" in params:
        values.append(params[f"{prefix}.{index}"])
        index += 1
    return values


def query_params(body: bytes, query_string: str) -> dict[str, str]:
    """An EC2 query request's parameters, from its form body and URL (last value wins)."""
    merged = parse_qs(query_string, keep_blank_values=True) | parse_qs(body.decode(errors="replace"),
                                                                        keep_blank_values=True)
    return {key: values[-1] for key, values in merged.items()}


# -- S3 ---------------------------------------------------------------------------------------------
def s3_questions(method: str, path: str, query_string: str, headers: Mapping[str, str],
                 body: bytes = b"") -> list[Question]:
    """Path-style requests (what the stand-in's endpoint gets): /BUCKET[/KEY]."""
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    query = parse_qs(query_string, keep_blank_values=True)
    if not bucket:
        return [Question("s3:ListAllMyBuckets", "*")]
    if key:
        return _object_questions(method, bucket, key, query, headers)
    if method == "POST" and "delete" in query:
        # DeleteObjects is authorized as DeleteObject on each key it names.
        keys = re.findall(r"<Key>(.*?)</Key>", body.decode(errors="replace"))
        return [Question("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{unescape(k)}") for k in keys]
    return [_bucket_question(method, bucket, query)]


def _object_questions(method: str, bucket: str, key: str, query: Mapping[str, list[str]],
                      headers: Mapping[str, str]) -> list[Question]:
    resource = f"arn:aws:s3:::{bucket}/{key}"
    if method in ("GET", "HEAD"):
        return [Question("s3:GetObject", resource)]
    if method == "DELETE":
        return [Question("s3:AbortMultipartUpload" if "uploadId" in query else "s3:DeleteObject", resource)]
    questions = [Question("s3:PutObject", resource)]
    source = headers.get("x-amz-copy-source")
    if method == "PUT" and source:
        questions.append(Question("s3:GetObject", f"arn:aws:s3:::{unquote(source).lstrip('/').split('?')[0]}"))
    return questions


def _bucket_question(method: str, bucket: str, query: Mapping[str, list[str]]) -> Question:
    resource = f"arn:aws:s3:::{bucket}"
    if method in ("GET", "HEAD") and not (set(query) - {"list-type", "prefix", "delimiter", "continuation-token",
                                                        "max-keys", "start-after", "encoding-type", "fetch-owner"}):
        prefix = query.get("prefix", [""])[-1]
        return Question("s3:ListBucket", resource, {"s3:prefix": [prefix]})
    if method == "GET" and "location" in query:
        return Question("s3:GetBucketLocation", resource)
    verb = {"PUT": "Put", "GET": "Get", "DELETE": "Delete", "HEAD": "Get"}.get(method, "Get")
    setting = next(iter(query), "Bucket")
    return Question(f"s3:{verb}Bucket{setting[:1].upper()}{setting[1:]}", resource)
