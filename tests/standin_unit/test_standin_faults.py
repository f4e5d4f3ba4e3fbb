"""The stand-in's capacity knob: a rule refuses every launch it matches, or with `times` only the
next N (capacity short for a moment, as in the zone test that catches workers leaving the master's
zone)."""
from __future__ import annotations

from xeoncluster.standin.faults import Faults


def test_a_rule_without_times_refuses_every_matching_launch() -> None:
    faults = Faults(capacity=[{"zone": "us-east-1a"}])
    refused: dict[int, int] = {}
    assert [faults.capacity_rule("us-east-1a", "c7i.2xlarge", refused) for _ in range(3)] == [0, 0, 0]
    assert faults.capacity_rule("us-east-1b", "c7i.2xlarge", refused) is None


def test_a_rule_with_times_refuses_only_that_many_launches() -> None:
    faults = Faults(capacity=[{"zone": "us-east-1a", "instance_type": "c7i.2xlarge", "times": 1}])
    refused: dict[int, int] = {}
    assert faults.capacity_rule("us-east-1a", "c7i.2xlarge", refused) == 0
    refused[0] = 1
    assert faults.capacity_rule("us-east-1a", "c7i.2xlarge", refused) is None
    assert faults.capacity_rule("us-east-1a", "m7i.2xlarge", {}) is None
