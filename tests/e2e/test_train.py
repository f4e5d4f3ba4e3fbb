"""`xeoncluster train` on a real 2-node local cluster: real sshd, real Intel MPI, real torch DDP."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import DATA
from tests.e2e.conftest import LocalEnv


@pytest.fixture(scope="module")
def cluster2(local_env: LocalEnv, warm_image: str) -> Iterator[str]:
    local_env.ok("up", "--name", "e2etrain", "--nodes", "2")
    yield "e2etrain"
    local_env.ok("down", "--name", "e2etrain", "--force")  # --force: a failed test may leave its run going


@dataclass(frozen=True)
class DemoRun:
    out: str
    fetched: Path


@pytest.fixture(scope="module")
def squad_demo(local_env: LocalEnv, cluster2: str, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The full demo, trained once: its metrics, and the predictions the official scoring checks."""
    fetched = tmp_path_factory.mktemp("fetched")
    result = local_env.ok("train", "squad", "--name", cluster2, "--demo", "--run", "squad-demo",
                          "--fetch-model", str(fetched), timeout=900)
    return DemoRun(result.out, fetched)


def run_dir(env: LocalEnv, cluster: str, run: str) -> Path:
    """The run's folder on its agent's host (this machine, for local nodes): log, record, launch."""
    return env.home / "clusters" / cluster / "runs" / run


def results_dir(env: LocalEnv, cluster: str, run: str) -> Path:
    """Where `train` puts the run's results: outside the cluster's folder, so `down` keeps them."""
    return env.home / "results" / cluster / run


def test_train_squad_demo_learns_and_metrics_arrive(local_env: LocalEnv, cluster2: str, squad_demo: DemoRun) -> None:
    metrics = json.loads((results_dir(local_env, cluster2, "squad-demo") / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["ranks_per_node"] == 1
    assert metrics["f1"] > metrics["eval_before"]["f1"] + 20
    assert metrics["stack"] == "stock"
    assert "f1=" in squad_demo.out and "untrained" in squad_demo.out
    assert "[0]" in squad_demo.out and "[1]" in squad_demo.out
    assert (squad_demo.fetched / "model" / "config.json").exists()
    launch = json.loads((run_dir(local_env, cluster2, "squad-demo") / "launch.json").read_text())
    assert "-ppn" in launch["argv"]
    assert launch["env"]["MASTER_ADDR"] == local_env.state(cluster2)["nodes"][0]["private_ip"]


def test_second_train_sends_no_package(local_env: LocalEnv, cluster2: str) -> None:
    # What this checks is the package left unsent and glue's metrics: the demo's 750 steps add nothing to it.
    result = local_env.ok("train", "glue", "--name", cluster2, "--demo", "--run", "glue-demo", "--",
                          "--max-steps", "40", timeout=900)
    assert "sent to none (unchanged)" in result.out + result.err
    metrics = json.loads((results_dir(local_env, cluster2, "glue-demo") / "metrics.json").read_text())
    assert {"accuracy", "f1"} <= set(metrics)
    assert metrics["world_size"] == 2


def test_train_glue_on_the_original_mrpc_tsv(local_env: LocalEnv, cluster2: str, tmp_path: Path) -> None:
    """A local file is copied to every node. The model is the demo's tiny BERT, built here: local nodes
    see this machine's files outside /root, so every node reads it from the same path."""
    data = DATA / "mrpc-train.tsv"
    subprocess.run([sys.executable, "-m", "xeoncluster.node", "demo-assets", "--out", str(tmp_path / "demo")],
                   check=True,
                   capture_output=True)
    model = str(tmp_path / "demo" / "model")
    local_env.ok("train", "glue", "--name", cluster2, "--train-file", str(data), "--model", model,
                 "--run", "glue-tsv", "--offline", "--", "--max_steps", "4", timeout=900)
    metrics = json.loads((results_dir(local_env, cluster2, "glue-tsv") / "metrics.json").read_text())
    assert metrics["world_size"] == 2


def test_dry_run_prints_the_command_and_runs_nothing(local_env: LocalEnv, cluster2: str) -> None:
    before = set((local_env.home / "clusters" / cluster2 / "runs").iterdir())
    out = local_env.ok("train", "squad", "--name", cluster2, "--demo", "--dry-run").out
    assert "mpiexec.hydra -f /root/hosts -n 2 -ppn 1" in out
    assert "export OMP_NUM_THREADS=" in out
    assert set((local_env.home / "clusters" / cluster2 / "runs").iterdir()) == before


def test_dead_node_is_named(local_env: LocalEnv, warm_image: str) -> None:
    name = "e2etdead"
    local_env.ok("up", "--name", name, "--nodes", "2")
    try:
        os.kill(int((local_env.root / "clusters" / name / "node1" / "sshd.pid").read_text()), signal.SIGKILL)
        result = local_env.cli("train", "squad", "--name", name, "--demo")
        assert result.code == 1
        line = result.err.strip().splitlines()[-1]
        assert "node1" in line and "unreachable" in line
    finally:
        local_env.ok("down", "--name", name)


def rank_processes(cluster: str, node: str, rank: int) -> list[int]:
    """Python ranks with this PMI_RANK on one node. Namespace nodes share the host's PID space, so a pkill
    on a node would also hit the test's own processes; reading environ finds exactly the rank. Only the
    node's namespace is searched: the whole /proc also holds the stand-in's containers, whose rank 1 this
    once killed while another test ran there."""
    listed = subprocess.run(["ip", "netns", "pids", f"xc-{cluster}-{node}"], capture_output=True, text=True)
    found = []
    for pid in listed.stdout.split():
        proc = Path("/proc") / pid
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"xeoncluster.node" in cmdline and b"-m" in cmdline and f"PMI_RANK={rank}".encode() in environ:
            found.append(int(pid))
    return found


def test_failed_rank_is_named(local_env: LocalEnv, cluster2: str) -> None:
    """Kill rank 1's python on node1 mid-run: the run ends with one line naming the rank/node and the log."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "xeoncluster.cli", "--config", str(local_env.config), "train", "squad", "--name",
         cluster2, "--demo", "--run", "squad-killed", "--", "--max_steps", "400"],
        env={**os.environ, "XEONCLUSTER_HOME": str(local_env.home)}, cwd=local_env.base,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = run_dir(local_env, cluster2, "squad-killed") / "train.log"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (log.exists() and "[0] step " in log.read_text()):
        time.sleep(0.5)
    victims = rank_processes(cluster2, "node1", rank=1)
    assert victims, "rank 1 is not running"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, out + err
    line = err.strip().splitlines()[-1]
    assert "run squad-killed failed: " in line and "rank 1" in line and "node1" in line, line
    assert f"log: {log}" in line


def test_resume_across_nodes_continues_from_the_checkpoint(local_env: LocalEnv, cluster2: str) -> None:
    """Kill a 2-node run after its first checkpoint; `--resume` continues from it, not from step 0."""
    args = ["train", "squad", "--name", cluster2, "--demo", "--run", "squad-resume", "--",
            "--max-steps", "160", "--save-steps", "40", "--no-eval-before"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "xeoncluster.cli", "--config", str(local_env.config), *args],
        env={**os.environ, "XEONCLUSTER_HOME": str(local_env.home)}, cwd=local_env.base,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    checkpoints = [local_env.root / "clusters" / cluster2 / node / "upper" / "xeoncluster" / "runs" / "squad-resume"
                   / "checkpoint-40" / name for node in ("node0", "node1")
                   for name in ("trainer_state.json", "model.safetensors")]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not all(p.exists() for p in checkpoints) and proc.poll() is None:
        time.sleep(0.2)
    assert all(p.exists() for p in checkpoints), "each node must hold its own checkpoint"
    for pid in rank_processes(cluster2, "node1", rank=1):
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=300)
    assert proc.returncode != 0
    local_env.ok(*args[:args.index("--")], "--resume", *args[args.index("--"):], timeout=900)
    metrics = json.loads((results_dir(local_env, cluster2, "squad-resume") / "metrics.json").read_text())
    assert metrics["resumed_from_step"] >= 40
    assert metrics["global_steps"] == 160


def test_official_squad_v2_scoring_of_fetched_predictions_matches_metrics(
        local_env: LocalEnv, cluster2: str, squad_demo: DemoRun, tmp_path: Path) -> None:
    """The run brings back predictions.json, null_odds.json and loss.png; the official v2.0 evaluation
    logic applied to them (independent of xeoncluster/node/tasks/squad_metrics.py) gives the EM/F1 in metrics.json."""
    from tests.training.squad_official import evaluate, official_layout
    from xeoncluster.node.tasks.demo_assets import DemoLayout, ensure_demo_assets

    run = results_dir(local_env, cluster2, "squad-demo")
    metrics = json.loads((run / "metrics.json").read_text())
    predictions = json.loads((run / "predictions.json").read_text())
    null_odds = json.loads((run / "null_odds.json").read_text())
    ensure_demo_assets(tmp_path / "demo", seed=0)
    records = json.loads(DemoLayout(tmp_path / "demo").squad_eval.read_text())["data"]
    assert set(predictions) == set(null_odds) == {r["id"] for r in records}
    assert any(not r["answers"]["text"] for r in records), "the demo eval set must hold v2 negatives"
    official = evaluate(official_layout(records), predictions, null_odds, na_prob_thresh=1.0)
    assert official["exact"] == pytest.approx(metrics["exact_match"], abs=1e-9)
    assert official["f1"] == pytest.approx(metrics["f1"], abs=1e-9)
    assert official["f1"] > 20
    png = (run / "loss.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert metrics["eval_loss"] is not None and metrics["eval_loss_history"]
    print(f"official v2.0: exact {official['exact']:.4f} f1 {official['f1']:.4f}; "
          f"metrics.json: exact_match {metrics['exact_match']:.4f} f1 {metrics['f1']:.4f}")
