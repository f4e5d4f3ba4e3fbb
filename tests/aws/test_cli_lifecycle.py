"""`xeoncluster up / status / down` through the real CLI entry point, under moto.

The SSH side is a RecordingShell (recording_shell.py): these tests assert what moto holds and what
each node was sent over the seam. No test opens a connection to an address moto hands out (the
autouse socket guard in conftest.py fails any non-loopback connection).
"""
from __future__ import annotations

import json
import stat
import threading

import pytest
from aws_helpers import (
    CALLER_IP,
    UBUNTU_AMI,
    instances,
    live_state,
    nothing_left,
    own_images,
    seed_cached_image,
    stock_image_key,
    write_config,
)
from recording_shell import MESH_MARK

from xeoncluster.providers.base import TAG_CLUSTER, TAG_IMAGE_KEY, TAG_ROLE
from xeoncluster.wire.contract import VERSION

SIZES = [1, 4, 64]


def tags(resource):
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def names(count):
    return [f"node{i}" for i in range(count)]


def assert_aws_holds_a_secure_cluster(ec2, count, master_image, worker_image):
    """The rules, IMDSv2, encryption and tags, as moto holds them."""
    group = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": ["xeoncluster-t1"]}])["SecurityGroups"][0]
    assert tags(group)[TAG_CLUSTER] == "t1"
    rules = group["IpPermissions"]
    assert len(rules) == 2
    self_rule = next(r for r in rules if r["IpProtocol"] == "-1")
    assert [p["GroupId"] for p in self_rule["UserIdGroupPairs"]] == [group["GroupId"]] and not self_rule["IpRanges"]
    ssh = next(r for r in rules if r["IpProtocol"] == "tcp")
    assert (ssh["FromPort"], ssh["ToPort"], [r["CidrIp"] for r in ssh["IpRanges"]]) == (22, 22, [f"{CALLER_IP}/32"])
    key = ec2.describe_key_pairs(KeyNames=["xeoncluster-t1"])["KeyPairs"][0]
    assert tags(key)[TAG_CLUSTER] == "t1"

    raw = instances(ec2)
    assert len(raw) == count
    volumes = []
    for inst in raw:
        assert inst["State"]["Name"] == "running"
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        assert [g["GroupId"] for g in inst["NetworkInterfaces"][0]["Groups"]] == [group["GroupId"]]
        assert tags(inst)[TAG_CLUSTER] == "t1"
        expected = master_image if tags(inst)[TAG_ROLE] == "master" else worker_image
        assert inst["ImageId"] == expected
        volumes += [m["Ebs"]["VolumeId"] for m in inst["BlockDeviceMappings"]]
    assert sorted(tags(i)[TAG_ROLE] for i in raw) == ["master"] + ["worker"] * (count - 1)
    for volume in ec2.describe_volumes(VolumeIds=volumes)["Volumes"]:
        assert volume["Encrypted"] is True and tags(volume)[TAG_CLUSTER] == "t1"


def assert_master_files(shell, xc_home, count):
    """~/.ssh/config, ~/hosts and the cluster key go to the master only; the key with mode 0600. So does
    what its agents read: the cluster's state and key, and the watch agent's settings."""
    assert list(shell.files) == ["node0"]
    files = {f.path: f for f in shell.files["node0"]}
    agent = {p.split("/clusters/t1/")[1]: files.pop(p) for p in list(files) if "xeoncluster/agent/clusters/t1/" in p}
    assert json.loads(files.pop("xeoncluster/agent/version.json").text)["version"] == VERSION
    assert set(files) == {".ssh/id_ed25519", ".ssh/config", ".ssh/known_hosts", "hosts"}
    assert set(agent) == {"state.json", "id_ed25519", "known_hosts", "autostop.json"}
    assert agent["id_ed25519"].mode == 0o600 and json.loads(agent["autostop.json"].text)["idle_minutes"] == 60
    state = xc_home / "clusters" / "t1"
    assert files[".ssh/id_ed25519"].text == (state / "id_ed25519").read_text()
    assert files[".ssh/id_ed25519"].mode == 0o600 and files[".ssh/config"].mode == 0o600
    assert files["hosts"].text.split() == names(count)
    for name in names(count):
        assert f"Host {name}\n" in files[".ssh/config"].text
        assert files[".ssh/known_hosts"].text.count(f"{name},") == 1
    assert stat.S_IMODE((state / "id_ed25519").stat().st_mode) == 0o600


def assert_mesh_checked_from_the_master(shell, count):
    mesh = [c for c in shell.commands("node0") if MESH_MARK in c]
    assert len(mesh) == 1
    assert mesh[0].startswith(f"for h in {' '.join(names(count))}; do")
    assert all(MESH_MARK not in c for n in names(count)[1:] for c in shell.commands(n))


@pytest.mark.parametrize("count", SIZES)
def test_up_that_bakes_then_status_then_down(xc, shell, ec2, aws, xc_home, count):
    run = xc("up", "--name", "t1", "--nodes", str(count))
    assert run.code == 0, run.err
    baked = own_images(ec2, "t1")
    assert len(baked) == 1 and tags(baked[0])[TAG_IMAGE_KEY] == stock_image_key()
    assert f"cluster 't1' is up: {count} node(s)" in run.out and f"baked image {baked[0]['ImageId']}" in run.out
    assert_aws_holds_a_secure_cluster(ec2, count, master_image=UBUNTU_AMI, worker_image=baked[0]["ImageId"])
    assert aws.mutating() == ["ImportKeyPair", "CreateSecurityGroup", "AuthorizeSecurityGroupIngress",
                              "RunInstances", "CreateImage", "ModifyVolume"] + (["RunInstances"] if count > 1 else [])

    # The playbooks ran on the master (before the bake) and on no other node.
    steps = shell.playbook_commands("node0")
    for fragment in ("apt-get install -y -qq libgoogle-perftools4 numactl python3-venv util-linux",
                     "/usr/bin/python3 -m venv ~/venv", "pip install", "--no-compile", "torch==2.13.0",
                     "import torch, transformers, accelerate, datasets, transformers.trainer",
                     "mpiexec.hydra --version"):
        assert any(fragment in c for c in steps), fragment
    assert all(shell.playbook_commands(n) == [] for n in names(count)[1:])
    assert shell.nodes_with("wait_ready") == names(count) == shell.nodes_with("scan_host_key")
    assert_master_files(shell, xc_home, count)
    assert_mesh_checked_from_the_master(shell, count)
    known = (xc_home / "clusters" / "t1" / "known_hosts").read_text().splitlines()
    assert [line.split(",")[0] for line in known] == names(count)
    assert json.loads((xc_home / "clusters" / "t1" / "state.json").read_text())["status"] == "ready"

    status = xc("status", "--name", "t1", "--json")
    assert status.code == 0, status.err
    rows = json.loads(status.out)["nodes"]
    assert [r["name"] for r in rows] == names(count)
    for row in rows:
        facts = (row["state"], row["market"], row["instance_type"], row["answers"])
        assert facts == ("running", "spot", "c7i.2xlarge", True)
        assert row["zone"] == "us-east-1a" and row["private_ip"] and row["ssh_host"]
        assert row["price_per_hour"] == 0.00001  # moto's spot price for that zone
    assert {c.node for c in shell.calls if c.command == "true"} == set(names(count))

    down = xc("down", "--name", "t1")
    assert down.code == 0, down.err
    assert "removed instances: " in down.out and "removed key_pair: xeoncluster-t1" in down.out
    assert nothing_left(live_state(ec2, "t1"))
    assert not (xc_home / "clusters" / "t1").exists()
    assert len(own_images(ec2, "t1")) == 1  # images are a cache: `down --purge-images` removes them


@pytest.mark.parametrize("count", SIZES)
def test_up_with_a_cached_image(xc, shell, ec2, aws, xc_home, count):
    image = seed_cached_image(ec2, stock_image_key())
    aws.clear()
    run = xc("up", "--name", "t1", "--nodes", str(count))
    assert run.code == 0, run.err
    assert f"reusing image {image}" in run.out
    assert_aws_holds_a_secure_cluster(ec2, count, master_image=image, worker_image=image)
    assert "CreateImage" not in aws.mutating()
    assert aws.mutating().count("RunInstances") == (1 if count == 1 else 2)
    if count > 1:
        assert f"==> launch master and {count - 1} worker(s)" in run.err
    # No playbook ran anywhere: the image already holds the stack.
    assert all(shell.playbook_commands(n) == [] for n in names(count))
    assert_master_files(shell, xc_home, count)
    assert_mesh_checked_from_the_master(shell, count)
    assert xc("down", "--name", "t1").code == 0
    assert nothing_left(live_state(ec2, "t1"))


def test_a_warm_up_boots_master_and_workers_at_once(xc, ec2):
    """Each launch waits at a barrier for the other: launched one after the other, the first would
    wait alone and the barrier would break."""
    image = seed_cached_image(ec2, stock_image_key())
    both_started = threading.Barrier(2, timeout=20)

    def patch(provider):
        real = provider.launch

        def launch(*args, **kwargs):
            both_started.wait()
            return real(*args, **kwargs)
        provider.launch = launch
    xc.patch_provider = patch
    run = xc("up", "--name", "t1", "--nodes", "3")
    assert run.code == 0, run.err
    assert_aws_holds_a_secure_cluster(ec2, 3, master_image=image, worker_image=image)
    assert [n["name"] for n in json.loads(xc("status", "--name", "t1", "--json").out)["nodes"]] == names(3)


def test_status_table_shows_state_market_zone_addresses_and_price(xc, shell, ec2):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    shell.exit_with(lambda c: c.node == "node1" and c.command == "true", 255, "Connection refused")
    run = xc("status", "--name", "t1")
    assert run.code == 1 and "node1 down" in run.err, run.err  # a node is down: the table, then exit 1
    header = next(line for line in run.out.splitlines() if "node" in line and "market" in line)
    for column in ("state", "ssh", "address", "private ip", "market", "zone", "type", "$/h"):
        assert column in header
    rows = {line.split()[1]: line for line in run.out.splitlines() if line.split()[1:2] in (["node0"], ["node1"])}
    nodes = {n["name"]: n for n in json.loads(xc("status", "--name", "t1", "--json").out)["nodes"]}
    for name, line in rows.items():
        for value in (nodes[name]["ssh_host"], nodes[name]["private_ip"], "spot", "us-east-1a", "c7i.2xlarge",
                      "running", "0.000"):
            assert value in line, (value, line)
    assert " up " in rows["node0"] and "DOWN (Connection refused)" in rows["node1"]


def test_status_prices_on_demand_nodes_from_the_catalog(xc, ec2):
    assert xc("up", "--name", "t1", "--nodes", "1", "--market", "on-demand").code == 0
    nodes = json.loads(xc("status", "--name", "t1", "--json").out)["nodes"]
    # catalog: moto has no Pricing API
    assert [(n["market"], n["price_per_hour"]) for n in nodes] == [("on-demand", 0.357)]


def test_second_up_reuses_the_image_the_first_baked(xc, shell, ec2, aws):
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    assert xc("down", "--name", "t1").code == 0
    baked = own_images(ec2, "t1")[0]["ImageId"]
    shell.calls.clear()
    aws.clear()
    run = xc("up", "--name", "t1", "--nodes", "2")
    assert run.code == 0, run.err
    assert f"reusing image {baked}" in run.out
    assert "CreateImage" not in aws.mutating()
    assert all(shell.playbook_commands(n) == [] for n in names(2))


def test_up_twice_is_a_no_op(xc, ec2, aws):
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    aws.clear()
    again = xc("up", "--name", "t1", "--nodes", "1")
    assert again.code == 0 and "already up; nothing to do" in again.err
    assert aws.mutating(service=None) == []


# -- down --------------------------------------------------------------------------------------------
def test_down_by_tag_with_the_state_folder_deleted(xc, ec2, xc_home):
    import shutil

    assert xc("up", "--name", "t1", "--nodes", "3").code == 0
    shutil.rmtree(xc_home / "clusters" / "t1")
    assert "pass --provider aws to search AWS by tag" in xc("down", "--name", "t1").out
    run = xc("down", "--name", "t1", "--provider", "aws")
    assert run.code == 0, run.err
    removed = next(line for line in run.out.splitlines() if line.startswith("removed instances: "))
    assert len(removed.split(": ", 1)[1].split(", ")) == 3
    assert "removed security_group: sg-" in run.out and "removed key_pair: xeoncluster-t1" in run.out
    assert nothing_left(live_state(ec2, "t1"))
    assert not (xc_home / "clusters" / "t1").exists()


def test_down_purge_images_removes_the_clusters_images_and_snapshots(xc, ec2):
    other = seed_cached_image(ec2, "0" * 64, baked_by="someone-else")
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    image = own_images(ec2, "t1")[0]
    snapshots = [m["Ebs"]["SnapshotId"] for m in image["BlockDeviceMappings"] if "Ebs" in m]
    assert snapshots
    run = xc("down", "--name", "t1", "--purge-images")
    assert run.code == 0, run.err
    assert f"removed image: {image['ImageId']}" in run.out and f"removed snapshot: {snapshots[0]}" in run.out
    assert own_images(ec2, "t1") == []
    left = {s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]}
    assert not left & set(snapshots)
    assert [i["ImageId"] for i in own_images(ec2)] == [other]  # another cluster's image is not touched
    assert nothing_left(live_state(ec2, "t1"))


def test_down_twice_is_fine(xc, ec2, aws):
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    assert xc("down", "--name", "t1").code == 0
    aws.clear()
    again = xc("down", "--name", "t1")
    assert again.code == 0, again.err
    assert "nothing to remove: cluster 't1' (aws) was removed by `down` at " in again.out
    assert aws.calls == []  # not searched for again
    never = xc("down", "--name", "never-existed")
    assert never.code == 0 and "nothing to remove" in never.out


def test_images_build_bakes_without_keeping_a_cluster_and_up_reuses_it(xc, shell, ec2, aws, xc_home):
    run = xc("images", "--name", "t1", "build")
    assert run.code == 0, run.err
    [image] = own_images(ec2, "t1-bake")
    assert f"baked image {image['ImageId']}" in run.out
    assert nothing_left(live_state(ec2, "t1-bake"))
    assert list(xc_home.glob("clusters/*/state.json")) == []
    listed = xc("images")
    assert listed.code == 0 and image["ImageId"] in listed.out and "t1-bake" in listed.out
    shell.calls.clear()
    up = xc("up", "--name", "t1", "--nodes", "2")
    assert up.code == 0 and f"reusing image {image['ImageId']}" in up.out
    assert all(shell.playbook_commands(n) == [] for n in names(2))
    removed = xc("images", "rm", image["ImageId"])
    assert removed.code == 0 and f"removed image: {image['ImageId']}" in removed.out
    missing = xc("images", "rm", image["ImageId"])
    assert missing.code == 2 and missing.error.startswith(f"error: no image '{image['ImageId']}'")


def test_images_rm_and_down_purge_images_wait_out_a_snapshot_still_in_use(xc, ec2, aws):
    """Real EC2 answers DeleteSnapshot with InvalidSnapshot.InUse for a while after DeregisterImage."""
    assert xc("images", "--name", "t1", "build").code == 0
    aws.fail("DeleteSnapshot", "InvalidSnapshot.InUse", times=2)
    removed = xc("images", "rm", own_images(ec2, "t1-bake")[0]["ImageId"])
    assert removed.code == 0, removed.err
    assert xc("up", "--name", "t2", "--nodes", "1").code == 0
    assert own_images(ec2, "t2")
    aws.fail("DeleteSnapshot", "InvalidSnapshot.InUse", times=2)
    down = xc("down", "--name", "t2", "--purge-images")
    assert down.code == 0, down.err
    assert own_images(ec2) == []
    assert ec2.describe_snapshots(OwnerIds=["self"],
                                  Filters=[{"Name": "tag-key", "Values": [TAG_IMAGE_KEY]}])["Snapshots"] == []


def test_the_image_is_taken_after_sync_and_without_the_masters_identity(xc, shell, ec2, aws, monkeypatch):
    """CreateImage(NoReboot) snapshots a live disk: pip's writes must be flushed first, and the image must
    not carry the baking cluster's authorized key, the machine id or cloud-init's instance state; the
    master gets them back right after the snapshot, before anything else runs on it."""
    from moto.ec2.models import EC2Backend

    real = EC2Backend.create_image
    seen: list[list[str]] = []

    def create_image(self, *args, **kwargs):
        seen.append(shell.commands("node0"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(EC2Backend, "create_image", create_image)
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    [before] = seen
    prepare = before[-1]
    for fragment in ("sync", ": > ~/.ssh/authorized_keys", ": > /etc/machine-id",
                     "mv /var/lib/cloud /var/lib/cloud.xc-bake",
                     "refusing to bake: a private key is on the node"):
        assert fragment in prepare, fragment
    after = shell.commands("node0")[len(before)]
    assert "mv ~/.ssh/authorized_keys.xc-bake ~/.ssh/authorized_keys" in after
    assert "mv /var/lib/cloud.xc-bake /var/lib/cloud" in after
    assert sum("authorized_keys.xc-bake ~/.ssh" in c for c in shell.commands("node0")) == 1


def test_by_default_every_node_is_configured_at_once_and_the_image_baked_in_the_background(xc, shell, ec2, aws):
    from pathlib import Path

    Path("cluster.yaml").unlink()  # the defaults: image_strategy: parallel
    plan = xc("plan", "--name", "t1", "--nodes", "3")
    assert "every node starts from the base and runs the playbooks, and node0 is baked in the background" in plan.out
    assert "baked from node0" not in plan.out
    run = xc("up", "--name", "t1", "--nodes", "3")
    assert run.code == 0, run.err
    ops = aws.mutating()
    assert ops.index("RunInstances") < ops.index("CreateImage") and ops.count("RunInstances") == 2
    assert "==> launch master and 2 worker(s)" in run.err  # all from the base image: they boot together
    assert ops.index("CreateImage") > [i for i, op in enumerate(ops) if op == "RunInstances"][-1]
    raw = instances(ec2)
    assert {i["ImageId"] for i in raw} == {UBUNTU_AMI}  # workers did not wait for the image
    for node in names(3):  # the playbooks ran on every node
        assert any("pip install" in c for c in shell.playbook_commands(node)), node
    assert "is being baked in the background" in run.out
    [image] = own_images(ec2, "t1")
    assert xc("up", "--name", "t2", "--nodes", "2").code == 0  # a later up reuses it
    assert {i["ImageId"] for i in instances(ec2, "t2")} == {image["ImageId"]}


@pytest.mark.parametrize("placement", ["false", "true"])
def test_with_no_image_node0_alone_is_the_master_and_every_node_holds_the_profile(xc, ec2, placement):
    """`image: none` (or an image still being baked by an earlier up) starts every node from the base:
    node0 alone is the master (a worker taken for one would have its replacement launched as a master),
    and every node holds the cluster's instance profile, so any of them can take the run agent over."""
    write_config(f"image: none\naws:\n  placement_group: {placement}\n")
    run = xc("up", "--name", "t1", "--nodes", "3")
    assert run.code == 0, run.err
    raw = instances(ec2)
    assert sorted(tags(i)[TAG_ROLE] for i in raw) == ["master", "worker", "worker"]
    assert all(i["IamInstanceProfile"]["Arn"].endswith("instance-profile/xeoncluster-t1-us-east-1") for i in raw)
    roles = {n["name"]: n["role"] for n in json.loads(xc("status", "--name", "t1", "--json").out)["nodes"]}
    assert roles == {"node0": "master", "node1": "worker", "node2": "worker"}, roles
