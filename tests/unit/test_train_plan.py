"""The provisioner side of `train`: requests, stack checks, the mpirun plan, failure lines."""
from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path

import pytest

from xeoncluster.agent.attempt import Outcome
from xeoncluster.agent.failure import failure_line, outcome_line
from xeoncluster.cli import main
from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import check_stack, get_stack
from xeoncluster.job.train_plan import check_request, dry_run_plan, env_file_text, parse_env, requested_backend
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.node.events.events import FailedEvent
from xeoncluster.providers.aws.provider import AwsProvider
from xeoncluster.providers.base import Node
from xeoncluster.topology import CpuTopology


def planned(instance_type: str) -> CpuTopology:
    return AwsProvider("us-east-1").machine_topology(instance_type)


def test_dry_run_for_four_two_socket_nodes() -> None:
    plan = dry_run_plan(TaskRequest(task="squad", demo=True), get_stack("stock"), planned("c7i.48xlarge"),
                        "c7i.48xlarge", 4, "ubuntu")
    env = dict(plan.ranks.env)
    assert (plan.ranks.world_size, plan.ranks.ranks_per_node, plan.ranks.threads_per_rank) == (8, 2, 48)
    assert env["OMP_NUM_THREADS"] == "48"
    assert env["I_MPI_PIN_DOMAIN"] == "socket"
    assert env["LD_PRELOAD"] == "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"
    assert env["PYTHONPATH"] == "/home/ubuntu/xeoncluster/lib"
    argv = list(plan.argv)
    assert argv[:7] == ["/home/ubuntu/venv/bin/mpiexec.hydra", "-f", "/home/ubuntu/hosts", "-n", "8", "-ppn", "2"]
    assert argv[argv.index("-m") - 1:argv.index("-m") + 3] == ["/home/ubuntu/venv/bin/python", "-m", "xeoncluster.node",
                                                                 "squad"]
    assert "--demo" in argv and "--stack" in argv


def test_overrides_reach_the_plan() -> None:
    request = TaskRequest(task="glue", glue_task="rte", ppn=4, threads=8, env=(("KMP_BLOCKTIME", "0"),),
                           trainer_args=("--learning_rate", "5e-5"), dataset="glue")
    plan = dry_run_plan(request, get_stack("stock"), planned("c7i.48xlarge"), "c7i.48xlarge", 2, "ubuntu")
    env = dict(plan.ranks.env)
    assert (plan.ranks.ranks_per_node, env["OMP_NUM_THREADS"], plan.user_env) == (4, "8", ("KMP_BLOCKTIME",))
    assert env["XC_ENV_FILE"].endswith("/xeoncluster/runs/<run>/env")
    assert list(plan.argv[-2:]) == ["--learning_rate", "5e-5"]
    assert "--task" in plan.argv and "rte" in plan.argv


def test_untuned_plan_keeps_only_rendezvous() -> None:
    plan = dry_run_plan(TaskRequest(task="squad", demo=True, tuned=False), get_stack("stock"),
                        planned("c6i.16xlarge"), "c6i.16xlarge", 2,
                        "ubuntu")
    keys = {k for k, _ in plan.ranks.env}
    assert {"MASTER_ADDR", "MASTER_PORT", "PYTHONPATH"} <= keys
    assert not keys & {"OMP_NUM_THREADS", "LD_PRELOAD", "I_MPI_PIN_DOMAIN", "KMP_AFFINITY"}


@pytest.mark.parametrize("request_,message", [
    (TaskRequest(task="squad", dataset="squad", demo=True), "--dataset cannot be combined"),
    (TaskRequest(task="squad", demo=True, model="bert-base-uncased"), "--demo brings its own model"),
    (TaskRequest(task="squad", eval_file=Path("e.json")), "--eval-file needs --train-file"),
    (TaskRequest(task="squad", ppn=0), "--ppn must be at least 1"),
    (TaskRequest(task="squad", threads=0), "--threads must be at least 1"),
    (TaskRequest(task="squad", max_restarts=-1), "--max-restarts must be 0 or more"),
    (TaskRequest(task="squad", max_interruptions=-1), "--max-interruptions must be 0 or more"),
    (TaskRequest(task="squad", trainer_args=("--ddp-backend", "ccl")), "the ccl backend needs the intel stack"),
    (TaskRequest(task="squad", trainer_args=("--ddp_backend=ccl",)), "the ccl backend needs the intel stack"),
    (TaskRequest(task="ner"), "unknown task 'ner'"),
])
def test_impossible_requests_fail_before_anything_runs(request_: TaskRequest, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        check_request(request_, get_stack("stock"))


def test_ccl_is_fine_on_the_intel_stack() -> None:
    check_request(TaskRequest(task="squad", trainer_args=("--ddp-backend", "ccl")), get_stack("intel"))
    assert requested_backend(("--x", "1", "--ddp-backend", "gloo")) == "gloo"


@pytest.mark.parametrize("changes,message", [
    ({"packages": ("torch==2.8.0", "intel-extension-for-pytorch==2.7.0", "oneccl_bind_pt==2.7.0",
                   "transformers==4.52.4")}, "IPEX 2.7.0 needs torch 2.7.x"),
    ({"packages": ("torch==2.7.0+cpu", "intel-extension-for-pytorch==2.7.0", "oneccl_bind_pt==2.6.0",
                   "transformers==4.52.4")}, "oneccl_bind_pt 2.6.0 needs torch 2.6.x"),
    ({"packages": ("torch==2.7.0+cpu", "intel-extension-for-pytorch==2.7.0", "oneccl_bind_pt==2.7.0",
                   "transformers==5.23.0")}, "transformers 5.23.0 no longer accepts ddp_backend=ccl"),
    ({"packages": ("torch==2.7.0+cpu", "oneccl_bind_pt==2.7.0")}, "intel-extension-for-pytorch is not pinned"),
    ({"backend": "nccl"}, "unknown backend 'nccl'"),
])
def test_stack_combination_errors(changes: dict, message: str) -> None:
    stack = dataclasses.replace(get_stack("intel"), **changes)
    if changes.get("backend") == "nccl":
        stack = dataclasses.replace(stack, ipex=False)
    with pytest.raises(ConfigError, match=message):
        check_stack(stack)


def test_shipped_stacks_are_consistent() -> None:
    check_stack(get_stack("stock"))
    check_stack(get_stack("intel"))


def test_failure_lines_name_rank_and_node() -> None:
    mpi = ("[0] step 3/10\n===================================================================================\n"
           "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 1 PID 4242 RUNNING AT node1\n"
           "=   KILLED BY SIGNAL: 9 (Killed)\n")
    assert failure_line(mpi, 9) == "training failed: rank 1 on node1 was killed by signal 9 (Killed)"
    exited = "=   RANK 3 PID 17 RUNNING AT node2\n=   EXIT STATUS: 1\n"
    assert failure_line(exited, 1) == "training failed: rank 3 on node2 exited with code 1"
    own = "[1] training: model 'x' is not available offline (HF_HUB_OFFLINE=1); pass a local directory\n"
    assert failure_line(own, 2).startswith("rank 1: training: model 'x' is not available offline")
    assert failure_line("nothing useful\n", 3) == "training failed with exit code 3"


def test_a_rank_that_lost_its_peer_is_a_witness_and_the_killed_rank_is_named(tmp_path: Path) -> None:
    """CI saw rank 1 SIGKILLed and the run blamed rank 0, whose gloo read failed a moment later."""
    log = tmp_path / "train.log"
    log.write_text("[0] step 20/400\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
                   "=   RANK 1 PID 4242 RUNNING AT node1\n=   KILLED BY SIGNAL: 9 (Killed)\n")
    witness = FailedEvent(rank=0, node="10.0.0.1", reason="RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error "
                                                          "[10.0.0.2]:2270: Connection reset by peer.")
    nodes = [Node(f"node{i}", f"n{i}", f"10.0.0.{i + 1}", "", "worker", "local") for i in range(2)]
    assert outcome_line(Outcome(1, events=[witness]), nodes, log) == \
        "training failed: rank 1 on node1 was killed by signal 9 (Killed)"
    cause = FailedEvent(rank=0, node="10.0.0.1", reason="ValueError: bad label")
    assert outcome_line(Outcome(1, events=[cause]), nodes, log) == "rank 0 on node0 failed: ValueError: bad label"
    both = "=   RANK 0 PID 1 RUNNING AT node0\n=   EXIT STATUS: 1\n" + log.read_text()
    assert failure_line(both, 1) == "training failed: rank 1 on node1 was killed by signal 9 (Killed)"


def test_parse_env() -> None:
    assert parse_env(("A=1", "B_2=x=y")) == (("A", "1"), ("B_2", "x=y"))
    with pytest.raises(ConfigError, match="expected NAME=VALUE"):
        parse_env(("NOVALUE",))


def test_train_dry_run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                           xc_home: Path) -> None:
    monkeypatch.setattr(sys, "argv", ["xeoncluster", "train", "squad", "--dry-run", "--nodes", "4",
                                      "--instance-type", "c7i.48xlarge", "--demo"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "-n 8 -ppn 2" in out and "export OMP_NUM_THREADS=48" in out
    assert list(xc_home.iterdir()) == []


def test_ranks_use_the_interface_that_reaches_the_master() -> None:
    """Custom VPCs without DNS hostnames: gloo and Hydra must not pick an address by resolving the hostname."""
    from xeoncluster.job.train_plan import Site, build_plan
    from xeoncluster.providers.aws.catalog import lookup, topology_of
    from xeoncluster.providers.base import Node

    nodes = [Node(f"node{i}", f"i-{i}", f"10.0.0.{i + 2}", "", "master" if i == 0 else "worker", "spot")
             for i in range(2)]
    topology = topology_of(lookup("c7i.2xlarge"))
    tuned = build_plan(TaskRequest(task="squad", demo=True), get_stack("stock"), nodes, topology, "/home/ubuntu",
                       "r1", {}, Site(iface="ens5"))
    untuned = build_plan(TaskRequest(task="squad", demo=True, tuned=False), get_stack("stock"), nodes, topology,
                         "/home/ubuntu", "r1", {}, Site(iface="ens5"))
    for plan in (tuned, untuned):
        env = dict(plan.ranks.env)
        assert (env["GLOO_SOCKET_IFNAME"], env["I_MPI_HYDRA_IFACE"]) == ("ens5", "ens5")
def test_env_values_stay_out_of_argv_and_launch_json() -> None:
    secret = "hf_s3cr3t-token-value"
    request = TaskRequest(task="squad", demo=True, run="r1", env=(("HF_TOKEN", secret),))
    plan = dry_run_plan(request, get_stack("stock"), planned("c7i.2xlarge"), "c7i.2xlarge", 2, "root")
    shown = json.dumps(plan.to_dict())
    assert secret not in shown and secret not in plan.command()
    assert plan.to_dict()["env"]["HF_TOKEN"] == "<redacted>"
    assert json.loads(env_file_text(request)) == {"HF_TOKEN": secret}


def test_the_training_package_reads_the_env_file_first(tmp_path: Path) -> None:
    from xeoncluster.node.__main__ import load_env_file

    path = tmp_path / "env"
    path.write_text(env_file_text(TaskRequest(task="squad", env=(("HF_TOKEN", "v1"), ("OMP_NUM_THREADS", "3")))))
    environ = {"XC_ENV_FILE": str(path), "OMP_NUM_THREADS": "1"}
    load_env_file(environ)
    assert (environ["HF_TOKEN"], environ["OMP_NUM_THREADS"]) == ("v1", "3")


def test_a_replacement_s_warm_up_is_one_rank_with_the_launch_s_environment_and_pinning() -> None:
    """Preparer.warm on a replacement: its --warm-data runs as one MPI rank from the master, with the running
    launch's -genv (the pin domain included, so it lands on local rank 0's CPU set), minus the hold of a job
    started ahead: the warm rank server it leaves is the one the next job's first rank there looks for."""
    plan = dry_run_plan(TaskRequest(task="squad", demo=True), get_stack("stock"), planned("c7i.48xlarge"),
                        "c7i.48xlarge", 2, "ubuntu")
    held = plan.ahead("/home/ubuntu/xeoncluster/runs/r1/.xc-ahead/hosts", "/tmp/release-1", plan.port)
    program = ["/home/ubuntu/venv/bin/python", "-m", "xeoncluster.node", "squad", "--warm-data"]
    words = shlex.split(held.warm_up("node3", program))
    assert words[:8] == ["I_MPI_HYDRA_BRANCH_COUNT=-1", "/home/ubuntu/venv/bin/mpiexec.hydra", "-hosts", "node3",
                         "-n", "1", "-ppn", "1"]
    pairs = {(words[i + 1], words[i + 2]) for i, word in enumerate(words) if word == "-genv"}
    assert pairs == {(k, v) for k, v in held.ranks.env if k != "XC_HOLD_FILE"}
    assert ("I_MPI_PIN_DOMAIN", "socket") in pairs and "XC_HOLD_FILE" in held.ranks.env_dict()
    assert words[-len(program):] == program
