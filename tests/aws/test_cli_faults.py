"""Faults during `xeoncluster up`: every mutating EC2 call failing once, Ctrl-C at every step, SSH
failures, and --keep-on-failure. After a failure the CLI exits 1 (130 for Ctrl-C) with one line
naming the failed step and the log, and nothing of the cluster is left in AWS."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_helpers import live_state, nothing_left, own_images, seed_cached_image, stock_image_key, write_config
from recording_shell import MESH_MARK

from xeoncluster.core.errors import ProviderError, RemoteError

CONFIG = "aws:\n  placement_group: true\n"
UP = ("up", "--name", "t1", "--nodes", "2")

# Every mutating EC2 call of `up --nodes 2` (bake path, placement group), with the step it belongs to.
UP_MUTATIONS = [
    ("ImportKeyPair", 1, "prepare: key, network"),
    ("CreateSecurityGroup", 1, "prepare: key, network"),
    ("AuthorizeSecurityGroupIngress", 1, "prepare: key, network"),
    ("CreatePlacementGroup", 1, "prepare: key, network"),
    ("RunInstances", 1, "launch master"),
    ("CreateImage", 1, "bake image"),
    ("ModifyVolume", 1, "grow the master's disk to 100 GiB"),
    ("RunInstances", 2, "launch 1 worker(s)"),
]


@pytest.fixture
def placement_config(xc_home):
    write_config(CONFIG)  # xc_home chdirs into the test's tmp_path


def assert_rolled_back(run, step, ec2, aws, xc_home, code=1):
    assert run.code == code, run.err
    line = run.error
    assert line.startswith(f"error: up failed at step '{step}': "), line
    assert "everything it created was removed" in line
    log = Path(line.split("log: ", 1)[1].split(" | ", 1)[0])
    assert log.is_file() and f"step '{step}' failed" in log.read_text()
    assert "Traceback" not in run.err
    assert nothing_left(live_state(ec2, "t1"))
    assert aws.placement_groups == {}
    state = xc_home / "clusters" / "t1"
    assert not (state / "state.json").exists() and not (state / "id_ed25519").exists()
    assert not state.exists() or [p.name for p in state.iterdir()] == ["lock"]
    assert log.parent == xc_home / "logs" / "t1"  # outside the cluster's folder: `down` keeps it too


def test_the_list_covers_every_mutating_call_of_up(xc, aws, placement_config):
    assert xc(*UP).code == 0
    seen = aws.mutating()
    assert [(op, seen[:i + 1].count(op)) for i, op in enumerate(seen)] == [(op, n) for op, n, _ in UP_MUTATIONS]


@pytest.mark.parametrize(("operation", "occurrence", "step"), UP_MUTATIONS,
                         ids=[f"{op}-{n}" for op, n, _ in UP_MUTATIONS])
def test_each_mutating_call_failing_once_rolls_back(xc, ec2, aws, xc_home, placement_config, operation, occurrence,
                                                    step):
    aws.fail(operation, "InvalidParameterValue", occurrence=occurrence)
    run = xc(*UP)
    assert_rolled_back(run, step, ec2, aws, xc_home)
    assert "InvalidParameterValue" in run.error
    if (operation, occurrence) in (("CreateImage", 1), ("ModifyVolume", 1), ("RunInstances", 2)):  # the master ran
        assert aws.mutating().count("TerminateInstances") == 1
    # A completed bake is a cache, not a cluster resource: the retry reuses it instead of baking again.
    baked = (operation, occurrence) in (("ModifyVolume", 1), ("RunInstances", 2))
    assert len(own_images(ec2, "t1")) == (1 if baked else 0)


def interrupt_after(method_name, call=1):
    """Patch provider.<method> so that its `call`-th use completes and then raises KeyboardInterrupt."""
    def patch(provider):
        real = getattr(provider, method_name)
        seen = []

        def wrapper(*args, **kwargs):
            result = real(*args, **kwargs)
            seen.append(1)
            if len(seen) == call:
                raise KeyboardInterrupt
            return result
        setattr(provider, method_name, wrapper)
    return patch


INTERRUPTS = [
    ("prepare: key, network", "provider", interrupt_after("prepare"), 0),
    ("image: bake", "reporter", "no image for key", 0),
    ("launch master", "provider", interrupt_after("launch", 1), 0),
    ("configure nodes (playbooks)", "shell", lambda c: c.method == "run" and "pip install" in c.command, 0),
    ("bake image", "provider", interrupt_after("bake"), 1),
    ("launch 1 worker(s)", "provider", interrupt_after("launch", 2), 1),
    ("launch 1 worker(s)", "shell", lambda c: c.method == "wait_ready" and c.node == "node1", 1),
    ("write ssh config and hostfile on the master", "shell", lambda c: c.method == "put_files", 1),
    ("check the master reaches every node by name", "shell", lambda c: MESH_MARK in c.command, 1),
]


@pytest.mark.parametrize(("step", "where", "how", "images"), INTERRUPTS,
                         ids=[f"{i}-{s.split()[0]}-{w}" for i, (s, w, _, _) in enumerate(INTERRUPTS)])
def test_ctrl_c_at_each_step_exits_130_and_leaves_nothing(xc, shell, ec2, aws, xc_home, monkeypatch,
                                                          step, where, how, images):
    if where == "provider":
        xc.patch_provider = how
    elif where == "shell":
        shell.raise_when(how, KeyboardInterrupt())
    else:
        from xeoncluster.core.progress import Reporter
        real = Reporter.detail

        def detail(self, message):
            real(self, message)
            if message.startswith(how):
                raise KeyboardInterrupt
        monkeypatch.setattr(Reporter, "detail", detail)
    run = xc(*UP)
    assert_rolled_back(run, step, ec2, aws, xc_home, code=130)
    assert "interrupted (Ctrl-C)" in run.error
    assert len(own_images(ec2, "t1")) == images


def test_ctrl_c_during_preflight_exits_130_and_creates_nothing(xc, ec2, aws, xc_home):
    aws.fail("DescribeInstanceTypes", KeyboardInterrupt())
    run = xc(*UP)
    assert run.code == 130 and run.error == "interrupted"  # click turns Ctrl-C outside a step into Abort
    assert aws.mutating(service=None) == []
    assert list(xc_home.glob("clusters/*")) == []


def test_ssh_failure_in_the_playbook_rolls_back(xc, shell, ec2, aws, xc_home):
    shell.raise_when(lambda c: c.method == "run" and "python3 -m venv" in c.command,
                     RemoteError("node0 (54.0.0.1) is unreachable over SSH: Connection reset by peer"))
    run = xc(*UP)
    assert_rolled_back(run, "configure nodes (playbooks)", ec2, aws, xc_home)
    assert "node0 (54.0.0.1) is unreachable over SSH" in run.error
    assert aws.mutating().count("TerminateInstances") == 1
    assert "CreateImage" not in aws.mutating()


def test_failing_playbook_command_rolls_back(xc, shell, ec2, aws, xc_home):
    shell.exit_with(lambda c: "pip install" in c.command, 1, "ERROR: No matching distribution found for torch==2.13.0")
    run = xc(*UP)
    assert_rolled_back(run, "configure nodes (playbooks)", ec2, aws, xc_home)
    assert "failed on node0 (exit 1): ERROR: No matching distribution found for torch==2.13.0" in run.error


def test_keep_on_failure_keeps_everything_and_says_how_to_remove_it(xc, shell, ec2, aws, xc_home):
    shell.exit_with(lambda c: MESH_MARK in c.command, 255, "ssh: connect to host node1 port 22: Connection timed out")
    run = xc(*UP, "--keep-on-failure")
    assert run.code == 1
    line = run.error
    assert line.startswith("error: up failed at step 'check the master reaches every node by name': ")
    assert "resources were kept" in line and "hint: inspect them, then run `xeoncluster down --name t1`" in line
    assert "log: " in line
    assert "TerminateInstances" not in aws.mutating()
    kept = live_state(ec2, "t1")
    assert len(kept["instances"]) == 2 and kept["security_groups"] and kept["key_pairs"]
    assert json.loads((xc_home / "clusters" / "t1" / "state.json").read_text())["status"] == "failed"

    down = xc("down", "--name", "t1")
    assert down.code == 0, down.err
    assert nothing_left(live_state(ec2, "t1"))


def test_a_failing_rollback_says_so_and_down_finishes_the_cleanup(xc, ec2, aws, xc_home):
    """The worker launch fails, then the rollback's TerminateInstances fails too: the user is told
    resources may remain and how to retry; the state is kept; `down` then removes everything."""
    aws.fail("RunInstances", "InvalidParameterValue", occurrence=2)
    aws.fail("TerminateInstances", "InternalError", times=20)
    run = xc(*UP)
    assert run.code == 1
    line = run.error
    assert line.startswith("error: up failed at step 'launch 1 worker(s)': ")
    assert "removing what it created also failed" in line and "resources may remain" in line
    assert "xeoncluster down --name t1" in line
    assert (xc_home / "clusters" / "t1" / "state.json").exists()
    assert live_state(ec2, "t1")["instances"]
    aws.faults.clear()
    down = xc("down", "--name", "t1")
    assert down.code == 0, down.err
    assert nothing_left(live_state(ec2, "t1"))


def test_up_after_a_kept_failure_pins_the_new_nodes_keys(xc, shell, ec2, aws, xc_home):
    """The next `up` replaces the kept nodes; it must pin the new instances' keys, not compare them
    with the old ones (a false 'someone is intercepting' alarm). The shell checks pins strictly."""
    shell.exit_with(lambda c: MESH_MARK in c.command, 255, "ssh: connect to host node1 port 22: Connection timed out")
    assert xc(*UP, "--keep-on-failure").code == 1
    shell.exit_codes.clear()
    again = xc(*UP)
    assert again.code == 0, again.err
    assert len(live_state(ec2, "t1")["instances"]) == 2


def test_a_warm_up_whose_master_cannot_launch_removes_the_workers_launched_beside_it(xc, ec2, aws, xc_home):
    seed_cached_image(ec2, stock_image_key())
    aws.clear()

    def patch(provider):
        real = provider.launch

        def launch(request):
            if request.role == "master":
                raise ProviderError("could not launch 1 master node(s): stand-in failure")
            return real(request)
        provider.launch = launch
    xc.patch_provider = patch
    run = xc("up", "--name", "t1", "--nodes", "3")
    assert_rolled_back(run, "launch master and 2 worker(s)", ec2, aws, xc_home)
    assert aws.mutating().count("RunInstances") == 1 and aws.mutating().count("TerminateInstances") >= 1
