"""Durable runs on real local nodes, storage in a folder here: a run that loses every node, master
included, comes back on the repaired cluster from the newest checkpoint in storage; `down` keeps the
results and the storage, and `runs`, `logs` and `storage ls|rm` read the gone cluster's runs there."""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import interruptible
from tests.e2e.conftest import LocalEnv, leftovers
from tests.e2e.test_recovery import lose_node, wait_for_end
from xeoncluster.node.startup.trainer_setup import DEFAULT_LOGGING_STEPS

# The nodes are lost once checkpoint-40 is in storage, and the resume trains on from it: steps past that
# would only repeat what the first launch showed.
SAVE_STEPS = 20
STEPS = 120


def durable(storage: Path, cluster: str, run: str) -> list[int]:
    folder = storage / cluster / "runs" / run / "checkpoints"
    return sorted(int(p.parent.name.split("-")[1]) for p in folder.glob("checkpoint-*/MANIFEST.json"))


def wait_until_durable(storage: Path, cluster: str, run: str, step: int) -> None:
    deadline = time.monotonic() + 600
    while not any(s >= step for s in durable(storage, cluster, run)):
        assert time.monotonic() < deadline, f"checkpoint-{step} of {run} never reached storage"
        time.sleep(0.5)


def test_a_run_that_loses_every_node_resumes_from_storage_and_down_keeps_it(local_env: LocalEnv,
                                                                            warm_image: str) -> None:
    name, run = "e2edur", "dur"
    storage = local_env.home / "storage"
    local_env.ok("up", "--name", name, "--nodes", "2")
    try:
        local_env.ok("train", "squad", "--name", name, "--demo", "--run", run, "--detach", "--",
                     "--max-steps", str(STEPS), "--save-steps", str(SAVE_STEPS))
        wait_until_durable(storage, name, run, 2 * SAVE_STEPS)
        lose_node(name, "node0")
        lose_node(name, "node1")
        lost = wait_for_end(local_env, name, run)
        assert lost["state"] == "failed", lost
        kept = durable(storage, name, run)
        assert len(kept) <= 3 and max(kept) >= 2 * SAVE_STEPS

        local_env.ok("up", "--name", name)
        resumed = local_env.ok("train", "squad", "--name", name, "--demo", "--run", run, "--resume", "--",
                               "--max-steps", str(STEPS), "--save-steps", str(SAVE_STEPS))
        assert f"checkpoint-{max(kept)} brought back from {storage / name / 'runs' / run}" in resumed.out
        metrics = json.loads((local_env.home / "results" / name / run / "metrics.json").read_text())
        assert metrics["global_steps"] == STEPS and metrics["resumed_from_step"] == max(kept), metrics
        stored = storage / name / "runs" / run
        assert json.loads((stored / "results" / "metrics.json").read_text())["global_steps"] == STEPS
        assert (stored / "model" / "config.json").exists() and (stored / "train.log").exists()
        assert json.loads((stored / "run.json").read_text())["state"] == "succeeded"

        down = local_env.ok("down", "--name", name)
        assert str(local_env.home / "results" / name) in down.out and str(storage / name) in down.out
    finally:
        local_env.cli("down", "--name", name, "--force")
    assert leftovers(local_env, name)["namespaces"] == []
    assert (local_env.home / "results" / name / run / "metrics.json").exists()

    gone = {r["run"]: r for r in json.loads(local_env.ok("runs", "--name", name, "--json").out)}
    assert gone[run]["state"] == "succeeded" and gone[run]["step"] == STEPS
    tensorboard_from_storage(local_env, name, run, stored / "results" / "tensorboard")
    [compared] = json.loads(local_env.ok("runs", "--name", name, "--compare", run, "--json").out)
    assert compared["steps"] == STEPS and {"exact_match", "f1"} <= set(compared["final"])
    assert f"step {STEPS}/{STEPS}" in local_env.ok("logs", run, "--name", name).out
    listed = local_env.ok("storage", "ls", "--name", name)
    assert run in listed.out and "succeeded" in listed.out
    local_env.ok("storage", "rm", run, "--name", name)
    assert not stored.exists()
    assert local_env.cli("logs", run, "--name", name).code == 2


def tensorboard_from_storage(env: LocalEnv, cluster: str, run: str, stored: Path) -> None:
    """The run's TensorBoard files in storage, read with TensorBoard's own reader: the loss at every
    logged step of both launches, the evaluations, and the nodes' use; then `xeoncluster tensorboard`
    serves them on loopback."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ranks = EventAccumulator(str(stored / "ranks"))
    ranks.Reload()
    losses = [e.step for e in ranks.Scalars("train/loss")]
    every = math.ceil(STEPS * DEFAULT_LOGGING_STEPS)  # a fraction of the run, as the Trainer's compute_steps makes it
    assert set(range(every, STEPS + 1, every)) <= set(losses) and max(losses) == STEPS, losses
    assert "eval/loss" in ranks.Tags()["scalars"], ranks.Tags()
    nodes = EventAccumulator(str(stored / "nodes"))
    nodes.Reload()
    assert {"nodes/node0/cpu_percent", "nodes/node1/mem_percent"} <= set(nodes.Tags()["scalars"])
    served = subprocess.Popen([sys.executable, "-m", "xeoncluster.cli", "--config", str(env.config), "tensorboard",
                               run, "--name", cluster], env={**os.environ, "XEONCLUSTER_HOME": str(env.home)},
                              cwd=env.base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=interruptible, start_new_session=True)
    try:
        assert served.stdout is not None
        line = served.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line + (served.stderr.read() if served.poll() is not None and served.stderr else "")
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url.group(0) + "data/plugin/scalars/tags", timeout=5) as answer:  # noqa: S310 - http on loopback
                    tags = json.loads(answer.read())
                break
            except OSError:
                assert time.monotonic() < deadline and served.poll() is None, "TensorBoard never answered"
                time.sleep(1)
        assert "train/loss" in tags[f"{run}/ranks"] and "nodes/node0/cpu_percent" in tags[f"{run}/nodes"], tags
    finally:
        served.send_signal(signal.SIGINT)
        try:
            assert served.wait(timeout=30) == 0
        finally:
            with contextlib.suppress(ProcessLookupError):  # what an unheard Ctrl-C left: TensorBoard too
                os.killpg(served.pid, signal.SIGKILL)
