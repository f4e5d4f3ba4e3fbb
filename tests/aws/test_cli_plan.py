"""`xeoncluster plan`: what `up` would create, the image and stack, and $/hour; touches nothing."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from aws_helpers import CALLER_IP, UBUNTU_AMI, seed_cached_image, stock_image_key, write_config

REPO = Path(__file__).resolve().parents[2]


def assert_touched_nothing(aws, xc_home, shell):
    assert aws.mutating(service=None) == []
    assert list(xc_home.glob("clusters/*")) == []
    assert shell.calls == []


def test_plan_for_four_nodes(xc, aws, xc_home, shell):
    run = xc("plan", "--nodes", "4")
    assert run.code == 0, run.err
    out = run.out
    assert "plan for cluster 'xc' in us-east-1" in out
    assert "create key_pair        xeoncluster-xc" in out
    assert "create security_group  xeoncluster-xc  vpc-" in out
    assert f"all traffic from itself; tcp/22 from {CALLER_IP}/32" in out
    rows = {line.split()[1]: line.split("│")[1:-1] for line in out.splitlines() if line.startswith("│")}
    assert [c.strip() for c in rows["master"]] == ["master", "1", "c7i.2xlarge", "spot", UBUNTU_AMI, "0.0000"]
    assert [c.strip() for c in rows["worker"]] == ["worker", "3", "c7i.2xlarge", "spot", "baked from node0", "0.0000"]
    assert (f"image: none cached; node0 runs the playbooks, is baked, workers start from that image "
            f"(key {stock_image_key()[:12]}, base: {UBUNTU_AMI})") in out
    assert "stack: stock (gloo): torch==2.13.0 transformers==5.23.0" in out
    assert "estimated cost: $0.0000/hour" in out  # moto's spot price is 0.00001
    assert "note: spot only: set aws.on_demand_fallback: true to fall back to on-demand" in out
    assert f"note: SSH allowed only from {CALLER_IP}/32" in out
    assert_touched_nothing(aws, xc_home, shell)


def test_plan_json_with_an_on_demand_master_and_a_cached_image(xc, ec2, aws, xc_home, shell):
    image = seed_cached_image(ec2, stock_image_key())
    aws.clear()
    write_config("aws:\n  master_market: on-demand\n  instance_types: [c7i.2xlarge, c6i.2xlarge]\n")
    run = xc("plan", "--nodes", "4", "--json")
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert plan["image"] == {"key": stock_image_key(), "id": image, "action": "reuse", "base_id": UBUNTU_AMI,
                             "base_note": "", "in_background": False, "pending": None}
    assert [(i["role"], i["count"], i["market"], i["image"], i["usd_per_hour"]) for i in plan["instances"]] == [
        ("master", 1, "on-demand", image, 0.357), ("worker", 3, "spot", image, 0.00001)]
    assert plan["usd_per_hour"] == round(0.357 + 3 * 0.00001, 6)
    assert plan["stack"]["name"] == "stock" and "torch==2.13.0" in plan["stack"]["packages"]
    assert "fallback instance type: c6i.2xlarge" in plan["notes"]
    text = xc("plan", "--nodes", "4").out
    assert f"image: reuse {image}; no playbook runs" in text
    assert "estimated cost: $0.3570/hour" in text
    assert_touched_nothing(aws, xc_home, shell)


def test_plan_without_the_ubuntu_parameter_shows_an_unknown_base(xc, aws, xc_home, shell):
    run = xc("plan", "--nodes", "4", "--region", "eu-west-1")
    assert run.code == 0, run.err
    assert "base: unknown (SSM parameter missing)" in run.out
    assert "master │ 1     │ c7i.2xlarge │ spot   │ unknown (SSM parameter missing)" in run.out
    assert "note: warning: no Ubuntu 24.04 image published in eu-west-1" in run.out
    assert "`up` would stop here" in run.out
    assert_touched_nothing(aws, xc_home, shell)
    up = xc("up", "--nodes", "4", "--region", "eu-west-1")
    assert up.code == 2 and up.error.startswith("error: no Ubuntu 24.04 image published in eu-west-1 (SSM parameter")
    assert_touched_nothing(aws, xc_home, shell)


def test_plan_with_a_given_image_needs_no_ssm_parameter(xc, aws, xc_home, shell):
    run = xc("plan", "--nodes", "2", "--region", "eu-west-1", "--image", UBUNTU_AMI, "--json")
    # moto's stock AMIs exist in every region.
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert (plan["image"]["action"], plan["image"]["id"]) == ("given", UBUNTU_AMI)
    assert all("Ubuntu" not in note for note in plan["notes"])
    assert_touched_nothing(aws, xc_home, shell)


def test_plan_bad_input_exits_2(xc, aws, xc_home):
    run = xc("plan", "--instance-type", "c7i.huge")
    assert run.code == 2 and run.err_lines == ["error: unknown instance type 'c7i.huge' (did you mean 'c7i.xlarge'?) "
                                               "| hint: fix instance_types in cluster.yaml"]
    assert aws.mutating(service=None) == []


def test_plan_against_a_moto_server_over_http(tmp_path, monkeypatch):
    """As a user would: the console entry point in a subprocess, AWS_ENDPOINT_URL=http://127.0.0.1:PORT."""
    spec = importlib.util.spec_from_file_location("moto_plan_demo", REPO / "benchmarks" / "moto_plan_demo.py")
    demo = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "moto_plan_demo", demo)
    spec.loader.exec_module(demo)
    [run] = demo.run_demo(tmp_path, full=False)
    assert run.code == 0, run.err
    assert "plan for cluster 'xc' in us-east-1" in run.out
    assert "create security_group  xeoncluster-xc" in run.out and "tcp/22 from 203.0.113.7/32" in run.out
    assert "base: unknown (SSM parameter missing)" in run.out
    assert "stack: stock (gloo)" in run.out and "estimated cost: $" in run.out
    assert not (tmp_path / "xchome" / "clusters").exists() or not any((tmp_path / "xchome" / "clusters").iterdir())
