"""Capacity through the CLI: the next zone, and on-demand only when on_demand_fallback is on."""
from __future__ import annotations

import json

from aws_helpers import live_state, nothing_left, write_config

ZONES = "aws:\n  zones: [us-east-1a, us-east-1b]\n"  # more aws keys follow, indented


def in_zone(ec2, zone):
    subnets = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]}
    return lambda params: subnets[params["NetworkInterfaces"][0]["SubnetId"]] == zone


def test_no_capacity_in_zone_a_launches_in_zone_b_and_says_why(xc, ec2, aws, xc_home):
    write_config(ZONES)
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99, when=in_zone(ec2, "us-east-1a"))
    run = xc("up", "--name", "t1", "--nodes", "3")
    assert run.code == 0, run.err
    assert ("master: c7i.2xlarge spot in us-east-1a unavailable (InsufficientInstanceCapacity: "
            "injected InsufficientInstanceCapacity); trying the next option") in run.err
    assert ("launched 1 master node(s) as c7i.2xlarge spot in us-east-1b after c7i.2xlarge spot in us-east-1a "
            "(InsufficientInstanceCapacity") in run.err
    assert "launched 2 worker node(s) as c7i.2xlarge spot in us-east-1b\n" in run.err
    status = json.loads(xc("status", "--name", "t1", "--json").out)["nodes"]
    assert {(n["zone"], n["market"]) for n in status} == {("us-east-1b", "spot")}
    # a, b for the master; the workers go straight to the master's zone.
    assert aws.ops().count("RunInstances") == 3


def test_spot_falls_back_to_on_demand_when_allowed(xc, ec2, aws):
    write_config(ZONES + "  on_demand_fallback: true\n")
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99, when=lambda p: "InstanceMarketOptions" in p)
    run = xc("up", "--name", "t1", "--nodes", "2")
    assert run.code == 0, run.err
    assert ("launched 1 master node(s) as c7i.2xlarge on-demand in us-east-1a after c7i.2xlarge spot in us-east-1a "
            "(InsufficientInstanceCapacity") in run.err
    assert "c7i.2xlarge spot in us-east-1b (InsufficientInstanceCapacity" in run.err
    nodes = json.loads(xc("status", "--name", "t1", "--json").out)["nodes"]
    assert [n["market"] for n in nodes] == ["on-demand", "on-demand"]
    assert all("InstanceLifecycle" not in i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
               if i["State"]["Name"] == "running")


def test_spot_failure_without_fallback_fails_and_rolls_back(xc, ec2, aws):
    write_config(ZONES)
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99)
    run = xc("up", "--name", "t1", "--nodes", "2")
    assert run.code == 1
    line = run.error
    assert line.startswith("error: up failed at step 'launch master': could not launch 1 master node(s): "
                           "c7i.2xlarge spot in us-east-1a (InsufficientInstanceCapacity")
    assert "c7i.2xlarge spot in us-east-1b (InsufficientInstanceCapacity" in line and "on-demand in" not in line
    assert "hint: add instance types or zones, or set aws.on_demand_fallback: true" in line
    assert aws.ops().count("RunInstances") == 2
    assert nothing_left(live_state(ec2, "t1"))


def master_lands_in_zone_b(ec2, aws):
    """Zone a has no capacity for the master's launch only (the first RunInstances)."""
    aws.fail("RunInstances", "InsufficientInstanceCapacity", when=in_zone(ec2, "us-east-1a"))


def worker_zones(ec2, aws):
    subnets = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]}
    return [subnets[p["NetworkInterfaces"][0]["SubnetId"]] for _, op, p in aws.calls
            if op == "RunInstances" and p["MinCount"] > 1]


def test_workers_launch_in_the_masters_zone_first(xc, ec2, aws):
    write_config(ZONES)
    master_lands_in_zone_b(ec2, aws)
    run = xc("up", "--name", "t1", "--nodes", "3")
    assert run.code == 0, run.err
    status = json.loads(xc("status", "--name", "t1", "--json").out)["nodes"]
    assert {n["zone"] for n in status} == {"us-east-1b"}
    assert worker_zones(ec2, aws) == ["us-east-1b"]


def test_with_a_placement_group_workers_only_try_the_masters_zone(xc, ec2, aws):
    write_config(ZONES + "  placement_group: true\n")
    master_lands_in_zone_b(ec2, aws)
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99, when=lambda p: p["MinCount"] > 1)
    run = xc("up", "--name", "t1", "--nodes", "3")
    assert run.code == 1
    assert ("could not launch 2 worker node(s) in us-east-1b, the zone the cluster's placement group is bound to"
            in run.error)
    assert "hint: retry later, add instance types, or set aws.placement_group: false" in run.error
    assert worker_zones(ec2, aws) == ["us-east-1b"]
    assert nothing_left(live_state(ec2, "t1"))


def test_workers_outside_the_masters_zone_are_announced(xc, ec2, aws):
    write_config(ZONES)
    master_lands_in_zone_b(ec2, aws)
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99,
             when=lambda p: p["MinCount"] > 1 and in_zone(ec2, "us-east-1b")(p))
    run = xc("up", "--name", "t1", "--nodes", "3")
    assert run.code == 0, run.err
    assert worker_zones(ec2, aws) == ["us-east-1b", "us-east-1a"]
    assert ("warning: workers run in us-east-1a, not in node0's zone us-east-1b (no capacity there): "
            "DDP traffic crosses zones") in run.err
