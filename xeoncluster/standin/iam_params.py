"""Reading an AWS query request (EC2, IAM): its parameters, numbered lists, tags and tag specifications,
and the `aws:RequestTag/...` keys that tags given with a request put into its context."""
from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import parse_qs

from xeoncluster.standin.iam_policy import Values

_INDEXED = re.compile(r"^(.*?)\.(\d+)(?:\.(.*))?$")


def query_params(body: bytes, query_string: str) -> dict[str, str]:
    """A query request's parameters, from its form body and URL (last value wins)."""
    merged = parse_qs(query_string, keep_blank_values=True) | parse_qs(body.decode(errors="replace"),
                                                                        keep_blank_values=True)
    return {key: values[-1] for key, values in merged.items()}


def numbered(params: Mapping[str, str], prefix: str) -> list[str]:
    """`Prefix.1`, `Prefix.2`, ... in order."""
    values, index = [], 1
    while f"{prefix}.{index}" in params:
        values.append(params[f"{prefix}.{index}"])
        index += 1
    return values


def tags(params: Mapping[str, str], prefix: str) -> dict[str, str]:
    """`Prefix.N.Key` / `Prefix.N.Value` pairs (EC2's `Tag.N`, IAM's `Tags.member.N`)."""
    found, index = {}, 1
    while f"{prefix}.{index}.Key" in params:
        found[params[f"{prefix}.{index}.Key"]] = params.get(f"{prefix}.{index}.Value", "")
        index += 1
    return found


def tag_specifications(params: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """EC2's `TagSpecification.N`: the tags asked for each resource type the request creates."""
    specs: dict[str, dict[str, str]] = {}
    indices = {m.group(2) for k in params if (m := _INDEXED.match(k)) and m.group(1) == "TagSpecification"}
    for index in sorted(indices, key=int):
        prefix = f"TagSpecification.{index}"
        specs[params.get(f"{prefix}.ResourceType", "")] = tags(params, f"{prefix}.Tag")
    return specs


def request_tag_keys(request_tags: Mapping[str, str]) -> dict[str, Values]:
    keys: dict[str, Values] = {f"aws:RequestTag/{k}": [v] for k, v in request_tags.items()}
    if request_tags:
        keys["aws:TagKeys"] = list(request_tags)
    return keys


def resource_tag_keys(resource_tags: Mapping[str, str], service: str) -> dict[str, Values]:
    """EC2 and IAM have their own `ec2:ResourceTag/...` / `iam:ResourceTag/...` besides the global
    `aws:ResourceTag/...`."""
    keys: dict[str, Values] = {f"aws:ResourceTag/{k}": [v] for k, v in resource_tags.items()}
    if service in ("ec2", "iam"):
        keys |= {f"{service}:ResourceTag/{k}": [v] for k, v in resource_tags.items()}
    return keys
