"""Fault and latency knobs, kept in a JSON file that the daemon re-reads when it changes, so they
can be set at start (`start --faults JSON`) or at runtime (`faults KEY=VALUE ...`)."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Faults:
    # Latency model: real-world seconds, divided by `scale` (tests use a large factor).
    scale: float = 1.0
    boot_seconds: float = 20.0          # pending -> running (then the container boots, ~3 s)
    ami_seconds: float = 120.0          # CreateImage pending -> available
    spot_notice_seconds: float = 120.0  # default notice of `interrupt`
    # Faults (seconds here are literal, not scaled).
    # [{"zone": .., "instance_type": .., "times": N}]: no capacity there; with "times", only for the
    # next N launches it matches (capacity that was short for a moment).
    capacity: list[dict[str, Any]] = field(default_factory=list)
    ami_not_found_seconds: float = 0.0      # DescribeImages: InvalidAMIID.NotFound after CreateImage
    snapshot_in_use_seconds: float = 0.0    # DeleteSnapshot: InvalidSnapshot.InUse after DeregisterImage
    sg_dependency_violation: bool = False  # DeleteSecurityGroup fails while its instances shut down
    dpkg_lock_seconds: int = 0              # first boot holds /var/lib/dpkg/lock-frontend this long
    describe_instances_failing_until: float = 0.0  # DescribeInstances: 503 Unavailable until this epoch time
    # Not a fault: boot nodes like a company image whose apt sources and pip.conf already point at
    # the mirror (lets `up` run before the CLI writes the apt/pip config keys itself).
    preseed_mirror: bool = False

    def scaled(self, seconds: float) -> float:
        return seconds / self.scale if self.scale > 0 else seconds

    def capacity_rule(self, zone: str | None, instance_type: str | None, refused: dict[int, int]) -> int | None:
        """The index of the first rule that refuses this launch; `refused` counts each rule's refusals."""
        for index, rule in enumerate(self.capacity):
            if rule.get("zone") not in (None, zone) or rule.get("instance_type") not in (None, instance_type):
                continue
            if "times" not in rule or refused.get(index, 0) < int(rule["times"]):
                return index
        return None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Faults:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown fault knob(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        return cls(**data)

    def updated(self, changes: dict[str, Any]) -> Faults:
        return Faults.from_dict({**asdict(self), **changes})


def parse_assignment(text: str) -> tuple[str, Any]:
    """KEY=VALUE with VALUE as JSON when it parses (numbers, true, lists), else a string."""
    key, _, raw = text.partition("=")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


@dataclass
class FaultsFile:
    path: Path
    _mtime: int = -1
    _current: Faults = field(default_factory=Faults)

    def read(self) -> Faults:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return self._current
        if mtime != self._mtime:
            self._current = Faults.from_dict(json.loads(self.path.read_text() or "{}"))
            self._mtime = mtime
        return self._current

    def write(self, faults: Faults) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(faults), indent=2) + "\n")
        os.replace(tmp, self.path)
