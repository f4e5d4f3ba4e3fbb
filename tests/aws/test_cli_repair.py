"""`up` on a cluster that is up, under moto: a lost node is replaced under its name from the cluster's
image in the master's zone, and `--nodes M` adds workers. The recording shell checks pinned host keys
strictly, so a replacement whose new key was not pinned would fail here."""
from __future__ import annotations

import json
from pathlib import Path

from aws_helpers import live_state, nothing_left, own_images
from recording_shell import MESH_MARK

from xeoncluster.providers.base import TAG_CLUSTER


def cluster_instances(ec2, name="t1"):
    reservations = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [name]}])["Reservations"]
    return [i for r in reservations for i in r["Instances"] if i["State"]["Name"] == "running"]


def by_name(xc):
    status = xc("status", "--name", "t1", "--json")
    return {n["name"]: n for n in json.loads(status.out)["nodes"]}, status


def spot_interrupt(instance_id):
    """What EC2 shows after reclaiming a spot instance: terminated, with the spot reason."""
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    backend = ec2_backends["123456789012"]["us-east-1"]
    instance = backend.get_instance(instance_id)
    backend.terminate_instances([instance_id])
    instance.state_reason = StateReason("Server.SpotInstanceTermination: Spot instance termination",
                                        "Server.SpotInstanceTermination")


def test_status_exits_1_naming_a_node_that_is_gone_and_not_replaced(xc, ec2, aws):
    assert xc("up", "--name", "t1", "--nodes", "3").code == 0
    nodes, healthy = by_name(xc)
    assert healthy.code == 0, healthy.err
    spot_interrupt(nodes["node2"]["id"])
    run = xc("status", "--name", "t1")
    assert run.code == 1, run.out
    assert "cluster 't1': node2 gone (no longer listed by the provider, and not replaced) (1 of 3 node(s))" \
        in run.error
    assert "`xeoncluster up --name t1` replaces them" in run.err and "--resume" in run.err
    listed, as_json = by_name(xc)
    assert as_json.code == 1 and sorted(listed) == ["node0", "node1"]
    assert json.loads(as_json.out)["missing"] == ["node2"]


def test_status_exits_1_when_the_master_is_gone(xc, ec2, aws):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    nodes, _ = by_name(xc)
    spot_interrupt(nodes["node0"]["id"])
    run = xc("status", "--name", "t1")
    assert run.code == 1 and "node0 gone" in run.error, (run.out, run.err)
    assert "the master (node0) does not answer" in run.out


def test_a_lost_worker_is_replaced_under_its_name(xc, ec2, aws, shell):
    assert xc("up", "--name", "t1", "--nodes", "3").code == 0
    nodes, _ = by_name(xc)
    [image] = own_images(ec2, "t1")
    spot_interrupt(nodes["node1"]["id"])
    lost, status = by_name(xc)
    assert status.code == 1 and "node1" not in lost
    run = xc("up", "--name", "t1")
    assert run.code == 0, run.err
    assert "node1 is down (spot interruption (Server.SpotInstanceTermination)); replacing it" in run.err
    assert "replaced node1" in run.out
    after, status = by_name(xc)
    assert status.code == 0, status.err
    assert sorted(after) == ["node0", "node1", "node2"] and after["node1"]["id"] != nodes["node1"]["id"]
    assert after["node1"]["zone"] == after["node0"]["zone"]
    assert [n for n, row in after.items() if row["replaced"]] == ["node1"]
    assert "worker (replaced)" in xc("status", "--name", "t1").out
    replacement = next(i for i in cluster_instances(ec2) if i["InstanceId"] == after["node1"]["id"])
    assert replacement["ImageId"] == image["ImageId"]
    assert sum(MESH_MARK in c for c in shell.commands("node0")) == 2  # reach checked again
    hosts = [f for f in shell.files["node0"] if f.path == "hosts"][-1].text
    assert hosts.split() == ["node0", "node1", "node2"]
    holds = [c for c in shell.commands("node0") if "xeoncluster.agent hold t1 up-" in c]
    assert holds and any("xeoncluster.agent release t1 up-" in c for c in shell.commands("node0"))


def test_a_repair_waits_for_no_other_repair_holding_the_queue(xc, ec2, aws, shell):
    """The queue is held by another `up` (another machine): this one changes nothing and says so."""
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    nodes, _ = by_name(xc)
    spot_interrupt(nodes["node1"]["id"])
    shell.exit_with(lambda c: "xeoncluster.agent hold t1 " in c.command, 3, "agent: the queue is held by up-x")
    run = xc("up", "--name", "t1")
    assert run.code == 1 and "cluster 't1' is being repaired by another `up`" in run.error, run.err
    assert [i["InstanceId"] for i in cluster_instances(ec2)] == [nodes["node0"]["id"]]


def test_up_with_more_nodes_adds_workers_from_the_image(xc, ec2, aws, shell):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    [image] = own_images(ec2, "t1")
    run = xc("up", "--name", "t1", "--nodes", "4")
    assert run.code == 0, run.err
    assert "added node2, node3" in run.out
    nodes, _ = by_name(xc)
    assert sorted(nodes) == ["node0", "node1", "node2", "node3"]
    assert {i["ImageId"] for i in cluster_instances(ec2) if i["InstanceId"] in
            (nodes["node2"]["id"], nodes["node3"]["id"])} == {image["ImageId"]}
    assert xc("up", "--name", "t1").code == 0  # the recorded size is now 4: nothing to do
    assert len(cluster_instances(ec2)) == 4
    shrink = xc("up", "--name", "t1", "--nodes", "2")
    assert shrink.code == 2 and "shrinking to 2 is not supported" in shrink.error


def test_a_replacement_that_cannot_launch_says_so_and_leaves_nothing_new(xc, ec2, aws):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    nodes, _ = by_name(xc)
    spot_interrupt(nodes["node1"]["id"])
    aws.fail("RunInstances", "InsufficientInstanceCapacity", times=99)
    run = xc("up", "--name", "t1")
    assert run.code == 1
    assert "could not launch 1 worker node(s)" in run.error
    assert [i["InstanceId"] for i in cluster_instances(ec2)] == [nodes["node0"]["id"]]
    aws.faults.clear()
    assert xc("down", "--name", "t1").code == 0
    assert nothing_left(live_state(ec2, "t1"))


def test_the_agent_replaces_a_node_while_the_image_bakes_without_asking_ssm(xc, ec2, aws, shell):
    """Right after a parallel `up` the image is still being baked, so a replacement starts from the base
    image. The run agent does that with the master's role, which may not read SSM: the base image id
    travels in the state `up` wrote."""
    from xeoncluster.cluster.command_context import make_context
    from xeoncluster.cluster.state import StateDir
    from xeoncluster.operations.repair import repair
    from xeoncluster.providers.config import load_config

    Path("cluster.yaml").write_text("image_strategy: parallel\n")
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    record = StateDir("t1").load()
    assert record.image.image is None and record.image.background and record.image.base
    nodes, _ = by_name(xc)
    spot_interrupt(nodes["node1"]["id"])
    aws.fail("GetParameter", "AccessDeniedException", times=99)  # as the master's role is answered
    asked = aws.ops("ssm").count("GetParameter")
    ctx = make_context(load_config(None, record.config), xc.provider_factory, shell.factory)
    repair(ctx, record, ctx.shell(), [record.node("node1")], len(record.nodes))
    replacement = next(i for i in cluster_instances(ec2) if i["InstanceId"] == record.node("node1").id)
    assert replacement["ImageId"] == record.image.base
    assert aws.ops("ssm").count("GetParameter") == asked


def test_up_replacing_a_lost_master_hands_the_new_one_its_lease(xc, ec2, aws):
    """The lost master renewed its lease a moment ago. The master `up` puts in its place must hold it:
    a lease left to the lost one fences the new master's watch agent at its first beat (no heartbeat,
    no autostop), and the workers it no longer beats power themselves off orphan_minutes later."""
    import time

    from xeoncluster.cluster.master_lease import LeaseBook
    from xeoncluster.cluster.state import StateDir
    from xeoncluster.providers.config import load_config

    assert xc("storage", "init", "--provider", "aws").code == 0
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    nodes, _ = by_name(xc)
    record = StateDir("t1").load()
    provider = xc.provider_factory(load_config(None, record.config), lambda _m: None)
    book = LeaseBook(provider.open_storage(record.storage), "t1")
    assert book.take(nodes["node0"]["id"], "node0", time.time(), 180.0) is not None  # the lost master's last beat
    spot_interrupt(nodes["node0"]["id"])
    run = xc("up", "--name", "t1")
    assert run.code == 0, run.err
    after, _ = by_name(xc)
    lease = book.current()
    assert lease is not None and lease.holder == after["node0"]["id"] != nodes["node0"]["id"], lease
    assert lease.epoch == 2 and lease.holder_name == "node0"
