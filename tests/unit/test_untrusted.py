"""untrusted.py, the one door from the cluster to this machine: each rule accepts what the tool itself
writes and refuses, whole-string, anything else (a trailing newline included), with one line."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from xeoncluster.cluster import cluster_files, untrusted
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.providers.base import Node
from xeoncluster.providers.registry import spec_for

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnQnGWTWnV6y0vkNEzYqo9bZ3y0D4xGxKDc9uK3mVb0"
NODE = Node(name="node1", id="i-0123456789abcdef0", private_ip="10.0.0.5", ssh_host="54.1.2.3", role="worker",
            market="spot")
INJECTED = "203.0.113.7\nHost *\n  ProxyCommand touch /tmp/x"


def refused(call, *args):
    with pytest.raises(untrusted.Refused) as caught:
        call(*args)
    error = caught.value
    assert isinstance(error, XeonClusterError) and error.exit_code == 1 and "\n" not in error.one_line()
    return error.message


@pytest.mark.parametrize("value", ["node0", "node1", "node12", "node9999"])
def test_node_names_as_providers_name_them_pass(value):
    assert untrusted.node_name(value, "the test") == value


@pytest.mark.parametrize("value", ["node0\n", "x\n..", "node", "node12345", "Node1", "../node1", "node1 ", ""])
def test_anything_else_is_not_a_node_name(value):
    message = refused(untrusted.node_name, value, "the master's record")
    assert message == f"the master's record names node {value!r}: refused (not a node name)"


@pytest.mark.parametrize("value", ["10.0.0.5", "54.1.2.3", "2001:db8::1", "ec2-54-1-2-3.compute-1.amazonaws.com",
                                   "ip-10-0-0-5.ec2.internal"])
def test_addresses_and_host_names_pass(value):
    assert untrusted.address(value, "the test") == value


@pytest.mark.parametrize("value", [INJECTED, "10.0.0.5\n", " 10.0.0.5", "fe80::1%eth0", "fe80::1%\nHost *",
                                   "a b", "-oProxyCommand=x", "host_name", "", "x" * 300])
def test_anything_else_is_not_an_address(value):
    assert "refused (" in refused(untrusted.address, value, "the test")


def test_an_empty_private_address_passes_only_where_allowed():
    assert untrusted.address("", "the test", empty=True) == ""


@pytest.mark.parametrize(("provider", "good", "bad"), [
    ("aws", "i-0123456789abcdef0", ["i-0123456789abcdef0\n", "i-XYZ", "sir-12345678", "i-12"]),
    ("local", "xc-e2e3-node1", ["xc-e2e3-node1\n", "xc-../node1", "xc-e2e3-node1 x", "node1"]),
])
def test_instance_ids_follow_their_providers_format(provider, good, bad):
    rule = spec_for(provider).instance_id
    assert untrusted.instance_id(good, rule, "the test") == good
    for value in bad:
        assert "refused (not an id of the form" in refused(untrusted.instance_id, value, rule, "the test")


def test_a_node_is_checked_field_by_field():
    rule = spec_for("aws").instance_id
    assert untrusted.node(NODE, "the test", rule) is NODE
    for changed in (replace(NODE, ssh_host=INJECTED), replace(NODE, private_ip="10.0.0.5\n"),
                    replace(NODE, name="node1\n"), replace(NODE, role="master\nx"), replace(NODE, id="i-1 x")):
        refused(untrusted.node, changed, "the test", rule)


@pytest.mark.parametrize("value", [KEY, "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY=", "ssh-rsa AAAAB3Nz"])
def test_host_keys_pass(value):
    assert untrusted.host_key(value, "the test") == value


@pytest.mark.parametrize("value", [KEY + "\n", KEY + " comment", f"{KEY}\nnode9 {KEY}", "ssh-dss AAAAB3Nz",
                                   "ssh-ed25519", "ssh-ed25519 AAAA!", "@cert-authority * " + KEY])
def test_anything_else_is_not_a_host_key(value):
    assert "refused (not a single 'TYPE BASE64' host key)" in refused(untrusted.host_key, value, "the test")


@pytest.mark.parametrize("value", ["r1\n", "../../../../.config/autostart", "..", ".hidden", "a/b", "", "x" * 65])
def test_run_names_follow_the_run_name_rule_whole(value):
    assert "refused (not a run name)" in refused(untrusted.run_name, value, "the test")


def test_a_run_record_must_be_the_run_asked_for():
    assert untrusted.same_run("r1", "r1", "the test") == "r1"
    assert refused(untrusted.same_run, "r2", "r1", "the record") == \
        "the record names run 'r2': refused (the run asked for is 'r1')"


def test_under_keeps_a_path_below_its_root(tmp_path: Path):
    assert untrusted.under(tmp_path, "t1/r1/metrics.json") == tmp_path.resolve() / "t1" / "r1" / "metrics.json"
    for bad in ("../x", "a/../../x", "/etc/passwd", ".", "", "a/.."):
        refused(untrusted.under, tmp_path, bad)
    (tmp_path / "link").symlink_to("/etc")
    refused(untrusted.under, tmp_path, "link/passwd")


@pytest.mark.parametrize(("key", "why"), [
    ("xc/runs/r1/results/../../../../../PWNED", "a '..' segment"), ("xc/runs/./r1", "a '.' segment"),
    ("/xc/runs/r1", "a leading '/'"), ("xc//runs", "an empty segment"), ("xc/runs/r1/", "an empty segment"),
    ("xc\\runs", "a backslash"), ("xc/runs/r1\n", "a control character"), ("xc/\x00", "a control character"),
])
def test_object_keys_with_a_way_out_are_refused(key, why):
    assert refused(untrusted.object_key, key, "storage") == f"storage names object key {key!r}: refused ({why})"


def test_a_key_must_be_below_its_prefix():
    assert untrusted.key_below("xc/runs/r1/results/a/b.json", "xc/runs/r1/results", "s") == "a/b.json"
    for key in ("xc/runs/r10/results/x", "xc/runs/r1/resultsx", "xc/runs/r1/results/", "other/x"):
        refused(untrusted.key_below, key, "xc/runs/r1/results", "s")


def test_cluster_files_refuse_rather_than_write_an_injected_line(tmp_path: Path):
    bad = replace(NODE, ssh_host=INJECTED)
    with pytest.raises(untrusted.Refused):
        cluster_files.user_ssh_config([bad], "ubuntu", tmp_path / "key", tmp_path / "known_hosts")
    with pytest.raises(untrusted.Refused):
        cluster_files.master_ssh_config([replace(NODE, private_ip="10.0.0.5\n  ProxyCommand x")], "ubuntu")
    with pytest.raises(untrusted.Refused):
        cluster_files.known_hosts([(NODE, f"{KEY}\n@revoked * {KEY}")])
    with pytest.raises(untrusted.Refused):
        cluster_files.hostfile([replace(NODE, name="node1\nnode9")])
    good = cluster_files.user_ssh_config([NODE], "ubuntu", tmp_path / "key", tmp_path / "known_hosts")
    assert re.search(r"^Host node1\n  HostName 54\.1\.2\.3\n", good)
    assert cluster_files.known_hosts([(NODE, KEY)]) == f"node1,54.1.2.3,10.0.0.5 {KEY}\n"


@pytest.mark.parametrize("change", [
    {"sweep": "lr\x1b[2J"}, {"params": {"max_steps\n": "4"}}, {"params": {"learning_rate": "1e-4\x1b]0;pwned\x07"}},
    {"params": {"learning_rate": "9" * 201}}, {"usage": {"node1\x1b[2J": {}}}, {"usage": {"../x": {}}}])
def test_a_run_record_s_shown_values_pass_its_rules_or_the_record_is_refused(change: dict[str, object]) -> None:
    from xeoncluster.runs.record import NodeUse, RunRecord
    from xeoncluster.runs.record_checks import checked

    good = RunRecord(run="lr-2", cluster="c", task="squad", sweep="lr", params={"learning_rate": "1e-4"},
                     usage={"node0": NodeUse(cpu_percent=90)})
    assert checked(good, "a run record on node0") is good
    bad = RunRecord.model_validate({**good.model_dump(), **change})
    with pytest.raises(untrusted.Refused, match=r"a run record on node0 names .*: refused"):
        checked(bad, "a run record on node0")
