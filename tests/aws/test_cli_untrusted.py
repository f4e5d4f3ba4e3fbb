"""Issue 24, findings 1 and 2, from the CLI under moto.

Finding 1: a master whose agent state and known_hosts were rewritten by a process on it (a node whose
address carries a `Host *` block with a ProxyCommand, a node the provider does not list, keys
overriding the laptop's pins) changes nothing in the laptop's ssh_config or pins when the node set
changes and `status` runs. A replacement the agent launched gets its key from the instance console, as
`up` reads it, never from the master.

Finding 2: a run record from the master, or a key in storage, never becomes a path outside the
results folder."""
from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from aws_helpers import write_config
from recording_shell import fake_host_key, listed_record

from xeoncluster.cluster.state import StateDir
from xeoncluster.providers.base import LaunchRequest, Node
from xeoncluster.providers.config import load_config
from xeoncluster.remote.shell import CommandResult
from xeoncluster.runs.record import RunRecord, RunState

INJECTED = "203.0.113.7\nHost *\n  ProxyCommand touch /tmp/xc-pwned"
EVIL_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEVILEVILEVILEVILEVILEVILEVILEVILEVILEVILEVIL"


def key_of(instance_id: str) -> str:
    return fake_host_key(Node(name="", id=instance_id, private_ip="", ssh_host="", role="worker", market="spot"))


def master_rewrites_its_state(shell, monkeypatch) -> list[str]:
    """The master answers a read of its agent's state.json and known_hosts with a forged pair; returns
    the commands that asked (none, once the laptop stops asking)."""
    record = StateDir("t1").load()
    forged = record.model_copy(deep=True)
    master, worker = record.node_list()[:2]
    forged.set_nodes([_with(master, INJECTED), _with(worker, INJECTED), _with(worker, INJECTED, "node7")])
    pins = "".join(f"{name},203.0.113.7 {EVIL_KEY}\n" for name in ("node0", "node1", "node7"))
    payload = forged.model_dump_json() + "\x1e" + pins
    asked: list[str] = []
    real = shell.answer

    def answer(call):
        if "state.json" in call.command and "known_hosts" in call.command and "cat" in call.command:
            asked.append(call.command)
            return CommandResult(call.node, 0, payload, "")
        return real(call)

    monkeypatch.setattr(shell, "answer", answer)
    return asked


def _with(node: Node, address: str, name: str | None = None) -> Node:
    return replace(node, ssh_host=address, name=name or node.name)


def console_shows_keys(monkeypatch, ids: set[str]) -> None:
    """moto's console output has no host-key block: give the instances in `ids` one, as cloud-init prints
    it, with the key the recording shell's node presents."""
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.ec2.responses.general import General
    from moto.ec2.utils import Base64EncodedString

    def get_console_output(self):
        instance_id = self._get_param("InstanceId")
        text = "[    0.000000] Linux version 6.8.0\n"
        if instance_id in ids:
            text += (f"-----BEGIN SSH HOST KEY KEYS-----\n{key_of(instance_id)} root@ip-10-0-0-9\n"
                     "-----END SSH HOST KEY KEYS-----\n")
        return ActionResult({"InstanceId": instance_id, "Timestamp": utcnow(),
                             "Output": Base64EncodedString.from_raw_string(text)})

    monkeypatch.setattr(General, "get_console_output", get_console_output)


def pins(xc_home) -> dict[str, str]:
    lines = (xc_home / "clusters" / "t1" / "known_hosts").read_text().splitlines()
    return {line.split(",")[0]: line for line in lines}


def ssh_g(xc_home, host: str) -> str:
    """What real OpenSSH makes of the laptop's ssh_config (-G: print the configuration, connect nowhere)."""
    config = xc_home / "clusters" / "t1" / "ssh_config"
    return subprocess.run(["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True).stdout


def test_a_forged_master_state_changes_nothing_on_the_laptop(xc, ec2, shell, xc_home, monkeypatch):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    before = pins(xc_home)
    asked = master_rewrites_its_state(shell, monkeypatch)
    master, worker = StateDir("t1").load().node_list()
    ec2.terminate_instances(InstanceIds=[worker.id])  # what the master's role can do to its own worker

    xc("status", "--name", "t1")

    config = (xc_home / "clusters" / "t1" / "ssh_config").read_text()
    assert "ProxyCommand" not in config and "203.0.113.7" not in config and "node7" not in config
    assert "proxycommand" not in ssh_g(xc_home, "node0").lower()
    assert pins(xc_home) == before  # the laptop's own; node1 stays recorded (lost) for `up` to replace
    assert EVIL_KEY not in (xc_home / "clusters" / "t1" / "known_hosts").read_text()
    assert [(n.name, n.id) for n in StateDir("t1").load().node_list()] == [("node0", master.id), ("node1", worker.id)]
    assert asked == []  # the master is not asked at all


def test_a_replacement_gets_its_key_from_the_console_not_from_the_master(xc, ec2, shell, xc_home, monkeypatch):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    before = pins(xc_home)
    record = StateDir("t1").load()
    master_rewrites_its_state(shell, monkeypatch)
    ec2.terminate_instances(InstanceIds=[record.node("node1").id])
    config = load_config(None, record.config)
    agent_side = xc.provider_factory(config, lambda _m: None)  # as the agent launches, with the cluster tag
    [new] = agent_side.launch(LaunchRequest(config, 1, record.image.image if record.image else None, "worker", 1,
                              near=record.node("node0")))
    [keyless] = agent_side.launch(LaunchRequest(config, 1, None, "worker", 2, near=record.node("node0")))
    console_shows_keys(monkeypatch, {new.id})

    status = xc("status", "--name", "t1")

    after = pins(xc_home)
    assert after["node0"] == before["node0"]
    assert after["node1"].endswith(" " + key_of(new.id)) and EVIL_KEY not in after["node1"]
    assert "node2" not in after  # no key out of band: left out, never trusted on first use
    assert f"node2 ({keyless.id}) shows no host key out of band" in status.err
    state = StateDir("t1").load()
    assert [(n.name, n.id) for n in state.node_list()] == [("node0", record.node("node0").id), ("node1", new.id)]
    assert state.replaced == ["node1"]
    ssh_config = (xc_home / "clusters" / "t1" / "ssh_config").read_text()
    assert f"Host node1\n  HostName {new.ssh_host}\n" in ssh_config and "ProxyCommand" not in ssh_config
    assert "proxycommand" not in ssh_g(xc_home, "node1").lower()


def test_the_laptop_follows_the_master_a_worker_launched_in_place_of_a_lost_one(xc, ec2, shell, xc_home,
                                                                                monkeypatch):
    """Issue 36: the recorded master is gone and one running instance carries the master's role and name:
    that one is the master now, with its key from the console; a second such instance makes neither one."""
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    before = pins(xc_home)
    record = StateDir("t1").load()
    ec2.terminate_instances(InstanceIds=[record.node("node0").id])
    config = load_config(None, record.config)
    worker_side = xc.provider_factory(config, lambda _m: None)
    [new] = worker_side.launch(LaunchRequest(config, 1, record.image.image if record.image else None, "master", 0,
                               near=record.node("node1")))
    console_shows_keys(monkeypatch, {new.id})

    assert xc("status", "--name", "t1").code == 0

    state = StateDir("t1").load()
    assert [(n.name, n.id, n.is_master) for n in state.node_list()] == [
        ("node0", new.id, True), ("node1", record.node("node1").id, False)]
    after = pins(xc_home)
    assert after["node0"].endswith(" " + key_of(new.id)) and after["node1"] == before["node1"]
    assert f"HostName {new.ssh_host}\n" in (xc_home / "clusters" / "t1" / "ssh_config").read_text()


def test_two_new_masters_are_followed_by_neither(xc, ec2, shell, xc_home, monkeypatch):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    record = StateDir("t1").load()
    ec2.terminate_instances(InstanceIds=[record.node("node0").id])
    config = load_config(None, record.config)
    worker_side = xc.provider_factory(config, lambda _m: None)
    twins = [worker_side.launch(LaunchRequest(config, 1, None, "master", 0))[0] for _ in range(2)]
    console_shows_keys(monkeypatch, {t.id for t in twins})

    xc("status", "--name", "t1")

    assert StateDir("t1").load().node("node0").id == record.node("node0").id


# -- finding 2: paths on the laptop from the master's run records and from storage keys ---------------
# Three levels up from XEONCLUSTER_HOME/results/t1 is the test's own folder (the review had four,
# from a deeper home): where the pre-fix code wrote, and where nothing may appear.
CLIMB = "../../../.config/autostart"


def master_keeps_runs(shell, monkeypatch, listed: RunRecord, read: RunRecord) -> None:
    """The master lists `listed` among its runs, and answers a read of any run's run.json with `read`."""
    real = shell.answer

    def answer(call):
        if "*/run.json" in call.command:
            return CommandResult(call.node, 0, listed_record(listed.run, listed.model_dump_json()), "")
        if "run.json" in call.command and "tail -c" in call.command:
            return CommandResult(call.node, 0, read.model_dump_json() + "\x1e", "")
        return real(call)

    monkeypatch.setattr(shell, "answer", answer)


def outside(tmp_path, home) -> list[str]:
    return sorted(str(p) for p in tmp_path.rglob("*") if p.is_file() and home not in p.parents
                  and p.name != "cluster.yaml")


def test_a_run_record_that_names_a_folder_outside_results_is_refused(xc, shell, xc_home, tmp_path, monkeypatch):
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    evil = RunRecord(run=CLIMB, cluster="t1", task="squad", state=RunState.SUCCEEDED)
    honest = RunRecord(run="r1", cluster="t1", task="squad", state=RunState.SUCCEEDED)

    master_keeps_runs(shell, monkeypatch, listed=honest, read=evil)
    named = xc("logs", "r1", "--name", "t1")
    assert named.code == 1 and f"names run {CLIMB!r}: refused" in named.error, named.err

    master_keeps_runs(shell, monkeypatch, listed=evil, read=evil)
    newest = xc("logs", "--name", "t1")  # the one record listed is left out, with one line (issue 34, finding 8)
    assert newest.code == 2 and "has no run yet" in newest.error, newest.err
    assert f"names run {CLIMB!r}: refused (not a run name); left out" in newest.err_lines[0], newest.err

    assert not (tmp_path / ".config").exists() and outside(tmp_path, xc_home) == []


def test_a_stored_key_that_climbs_out_of_the_results_folder_is_refused(xc, xc_home, tmp_path):
    """The cluster is gone (never up on this machine): `logs` reads the run and its results from storage,
    where the master's role could write any key below its prefix (S3 does not normalise `..`)."""
    import boto3

    bucket = "xc-untrusted-runs"
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    write_config(f"storage: s3://{bucket}\n")
    record = RunRecord(run="r1", cluster="t1", task="squad", state=RunState.SUCCEEDED)
    for key, body in [("t1/runs/r1/run.json", record.model_dump_json()), ("t1/runs/r1/train.log", "step 1\n"),
                      ("t1/runs/r1/results/metrics.json", "{}"),
                      ("t1/runs/r1/results/../../../../../PWNED", "written by the master's role")]:
        s3.put_object(Bucket=bucket, Key=key, Body=body.encode())

    logs = xc("logs", "r1", "--name", "t1")

    assert logs.code == 1 and "names object key 't1/runs/r1/results/../../../../../PWNED': refused (a '..' " \
                               "segment)" in logs.error, logs.err
    assert list(tmp_path.parent.glob("PWNED")) == [] and outside(tmp_path, xc_home) == []
    assert not (xc_home / "results" / "t1" / "r1" / "metrics.json").exists()  # nothing written before the check

    s3.delete_object(Bucket=bucket, Key="t1/runs/r1/results/../../../../../PWNED")
    assert xc("logs", "r1", "--name", "t1").code == 0
    assert (xc_home / "results" / "t1" / "r1" / "metrics.json").read_text() == "{}"


def test_storage_lists_no_run_whose_record_is_not_the_one_its_key_names(xc):
    import boto3

    bucket = "xc-untrusted-runs"
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    write_config(f"storage: s3://{bucket}\n")
    for folder, run, cluster in [("r1", "r1", "t1"), ("r2", CLIMB, "t1"), ("r3", "r1", "t1"), ("r4", "r4", "other")]:
        record = RunRecord(run=run, cluster=cluster, task="squad", state=RunState.SUCCEEDED)
        s3.put_object(Bucket=bucket, Key=f"t1/runs/{folder}/run.json", Body=record.model_dump_json().encode())
    cut = RunRecord(run="r5", cluster="t1", task="squad").model_dump_json()[:90]
    s3.put_object(Bucket=bucket, Key="t1/runs/r5/run.json", Body=cut.encode())

    listed = xc("storage", "ls", "--name", "t1", "--json")

    assert listed.code == 0, listed.err
    assert [r["run"] for r in json.loads(listed.out)] == ["r1"]
    assert len([line for line in listed.err_lines if line.endswith("; left out")]) == 4, listed.err
    assert "refused (not a run record: the text: Invalid JSON: EOF" in listed.err, listed.err


# -- issue 34, finding 12: the index-base tag is the master's role's to write ------------------------
@pytest.mark.parametrize("tag", ["abc", "-3", "99999", "1e3", "٣"])
def test_an_instance_whose_index_tag_is_no_index_is_left_out_of_status(xc, ec2, tag):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    master, worker = StateDir("t1").load().node_list()
    ec2.create_tags(Resources=[worker.id], Tags=[{"Key": "xeoncluster:index-base", "Value": tag}])

    status = xc("status", "--name", "t1", "--json")

    assert status.code == 1, status.err  # a recorded node the provider does not show as the cluster's is gone
    assert json.loads(status.out)["missing"] == [worker.name]
    lines = [line for line in status.err_lines if worker.id in line]
    assert len(lines) == 1 and f"xeoncluster:index-base={tag!r}" in lines[0] and lines[0].endswith("left out"), \
        status.err
    assert [n["id"] for n in json.loads(status.out)["nodes"]] == [master.id]


# -- issue 34, finding 3: a node is ours only when the provider shows our owner tag on it -------------
def test_an_instance_tagged_with_the_cluster_by_another_owner_is_never_adopted_nor_removed(
        xc, ec2, shell, xc_home, monkeypatch):
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    record = StateDir("t1").load()
    before = pins(xc_home)
    master = record.node("node0")
    ec2.terminate_instances(InstanceIds=[record.node("node1").id])
    # What a colleague (or another cluster's master role) can launch: our cluster's tags, another owner.
    foreign = ec2.run_instances(
        ImageId=ec2.describe_instances(InstanceIds=[master.id])["Reservations"][0]["Instances"][0]["ImageId"],
        MinCount=1, MaxCount=1, InstanceType="c7i.2xlarge", TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "xeoncluster:cluster", "Value": "t1"}, {"Key": "xeoncluster:role", "Value": "worker"},
            {"Key": "xeoncluster:owner", "Value": "AIDACOLLEAGUE0000001"},
            {"Key": "xeoncluster:index-base", "Value": "1"}]}])["Instances"][0]["InstanceId"]
    console_shows_keys(monkeypatch, {foreign})

    status = xc("status", "--name", "t1", "--json")

    assert foreign not in status.out and foreign not in (xc_home / "clusters" / "t1" / "ssh_config").read_text()
    assert pins(xc_home) == before and key_of(foreign) not in (xc_home / "clusters" / "t1" / "known_hosts").read_text()
    assert [(n.name, n.id) for n in StateDir("t1").load().node_list()] == [
        ("node0", master.id), ("node1", record.node("node1").id)]
    assert xc("down", "--name", "t1").code == 0
    left = ec2.describe_instances(InstanceIds=[foreign])["Reservations"][0]["Instances"][0]
    assert left["State"]["Name"] == "running"  # a colleague's instance is not ours to remove
