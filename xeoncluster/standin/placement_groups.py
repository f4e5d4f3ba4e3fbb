"""Placement groups for the stand-in: moto raises NotImplementedError for them, so the stand-in keeps
its own, with EC2's errors and filters."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from xeoncluster.standin.ec2_errors import ACCOUNT
from xeoncluster.standin.ec2_errors import ec2_error as _error


@dataclass
class PlacementGroups:
    groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def create(self, region: str, name: str, strategy: str, tags: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            if (region, name) in self.groups:
                raise _error("InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists.")
            group = {"GroupName": name, "Strategy": strategy, "State": "available",
                     "GroupId": f"pg-{len(self.groups) + 1:017x}",
                     "GroupArn": f"arn:aws:ec2:{region}:{ACCOUNT}:placement-group/{name}",
                     "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            self.groups[(region, name)] = group
            return group

    def delete(self, region: str, name: str) -> None:
        with self.lock:
            if self.groups.pop((region, name), None) is None:
                raise _error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")

    def describe(self, region: str, names: list[str], filters: dict[str, list[str]]) -> list[dict[str, Any]]:
        with self.lock:
            found = [g for (r, _), g in self.groups.items() if r == region]
        if names:
            found = [g for g in found if g["GroupName"] in names]
        return [g for g in found if all(_pg_matches(g, k, v) for k, v in filters.items())]


def _pg_matches(group: dict[str, Any], name: str, values: list[str]) -> bool:
    if name == "group-name":
        return group["GroupName"] in values
    if name == "strategy":
        return group["Strategy"] in values
    if name == "state":
        return group["State"] in values
    if name.startswith("tag:"):
        return any(t["Key"] == name[4:] and t["Value"] in values for t in group["Tags"])
    if name == "tag-key":
        return any(t["Key"] in values for t in group["Tags"])
    raise _error("InvalidParameterValue", f"The filter '{name}' is invalid")
