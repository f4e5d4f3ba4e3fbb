"""Spot-native training on real local nodes: with no CLI alive, the run's agent trains on without a lost node
while it replaces it, and grows back; a noticed node is swapped for a replacement readied ahead; a cluster
grows in place; --max-interruptions 0 keeps the one-line failure."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.conftest import LocalEnv, leftovers
from tests.log_watch import FINISHED

SAVE_STEPS = 40
STEPS = 200  # the loss comes at step 60: what follows only has to end the run
# ... or outlast the replacement's start, on the node left, for the run to grow back: lost after step 75 of 500,
# it grew back at checkpoint-160 here (the new node's data and warm server, then the job started ahead on both).
GROWN_STEPS = 400
NOTICES = 1  # the stand-in's sweep test gives one run five, more than --max-restarts' default
NOTICED_STEPS = 500  # a notice took 190-260 steps to swap in unloaded


def lose_node(cluster: str, node: str) -> None:
    """What losing a machine looks like here: its namespace and every process in it disappear. A node that
    is not there is the test's mistake (a replacement took another name), not a loss that went unnoticed."""
    ns = f"xc-{cluster}-{node}"
    listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    assert listed.returncode == 0, f"no node {node} in {cluster} to lose: {listed.stderr.strip()}"
    pids = listed.stdout.split()
    subprocess.run(["kill", "-9", *pids], capture_output=True)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def start_training(env: LocalEnv, cluster: str, run: str, *extra: str) -> subprocess.Popen[str]:
    import os

    argv = [sys.executable, "-m", "xeoncluster.cli", "--config", str(env.config), "train", "squad", "--name",
            cluster, "--demo", "--run", run, *extra, "--", "--max-steps", str(STEPS), "--save-steps", str(SAVE_STEPS)]
    return subprocess.Popen(argv, env={**os.environ, "XEONCLUSTER_HOME": str(env.home)}, cwd=env.base,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def logged_steps(text: str) -> list[int]:
    """The steps a run's log reports (each `step N/TOTAL` line; how often depends on the run's length)."""
    return [int(part.split("/")[0]) for part in text.split("step ")[1:] if part.split("/")[0].isdigit()]


def wait_for_step(env: LocalEnv, cluster: str, run: str, step: int, proc: subprocess.Popen[str]) -> None:
    log = env.home / "clusters" / cluster / "runs" / run / "train.log"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        steps = logged_steps(log.read_text() if log.exists() else "")
        if steps and max(steps) >= step:
            return
        time.sleep(0.5)
    raise AssertionError(f"run {run} never reached step {step}")


def wait_for_end(env: LocalEnv, cluster: str, run: str, timeout: float = 900) -> dict:
    """The run's record as `runs --json` gives it, once the agent's record (on this machine, under the
    local master's home) says it ended: a CLI process is about 0.9 CPU-seconds, taken from the run, and
    reading the file is none."""
    record = env.home / "clusters" / cluster / "runs" / run / "run.json"
    deadline = time.monotonic() + timeout
    while not finished(record):
        assert time.monotonic() < deadline, f"run {run} did not end within {timeout}s"
        time.sleep(0.5)
    records = {r["run"]: r for r in json.loads(env.ok("runs", "--name", cluster, "--json").out)}
    assert records[run]["state"] in FINISHED, records[run]
    return records[run]


def finished(record: Path) -> bool:
    try:
        return json.loads(record.read_text())["state"] in FINISHED
    except (OSError, ValueError, KeyError):  # not written yet, or caught mid-write
        return False


def wait_for_stored(path: Path, timeout: float = 120) -> None:
    """The agent stores the results after the record says the run ended; each file lands whole (renamed)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was never stored"
        time.sleep(0.5)


def test_a_detached_run_survives_a_lost_node_with_no_cli_alive(local_env: LocalEnv, warm_image: str) -> None:
    """With no CLI alive and no notice, the run trains on with the node left while the agent replaces the lost
    one (--train-while-replacing, the default: nobody idles through the replacement's start), then grows back
    to both nodes at a step."""
    name = "e2erec"
    local_env.ok("up", "--name", name, "--nodes", "2")
    try:
        started = local_env.ok("train", "squad", "--name", name, "--demo", "--run", "lost", "--detach", "--",
                               "--max-steps", str(GROWN_STEPS), "--save-steps", str(SAVE_STEPS))
        assert "run lost started" in started.out  # and no CLI process is left: local_env.ok waited for it
        log = local_env.home / "clusters" / name / "runs" / "lost" / "train.log"
        deadline = time.monotonic() + 600
        while max(logged_steps(log.read_text() if log.exists() else ""), default=0) < SAVE_STEPS + 20:
            assert time.monotonic() < deadline, "the run never reached its first checkpoint"
            time.sleep(0.5)
        lose_node(name, "node1")
        record = wait_for_end(local_env, name, "lost")
        assert record["state"] == "succeeded" and record["restarts"] >= 1, record
        fetched = local_env.ok("logs", "lost", "--name", name)
        assert "agent: restart: node1 lost" in fetched.out and "training on with 1 node(s) while it is replaced" \
            in fetched.out, fetched.out[-3000:]
        assert "agent: grew back: node1 joined; training on 2 node(s)" in fetched.out, fetched.out[-3000:]
        assert f"metrics: {local_env.home / 'results' / name / 'lost' / 'metrics.json'}" in fetched.out
        metrics = json.loads((local_env.home / "results" / name / "lost" / "metrics.json").read_text())
        assert metrics["world_size"] == 2 and metrics["global_steps"] == GROWN_STEPS
        [restart] = metrics["restarts"]
        assert restart["node"] == "node1" and restart["from_step"] is not None and restart["from_step"] >= SAVE_STEPS
        assert restart["nodes_after"] == 1 and restart["replacing"] is True, restart
        assert 0 <= metrics["lost_steps"] <= SAVE_STEPS
        # The agent wrote metrics.json with the restarts before storing it: `logs` after `down` reads this copy.
        stored = local_env.home / "storage" / name / "runs" / "lost" / "results" / "metrics.json"
        results = local_env.home / "results" / name / "lost" / "metrics.json"
        wait_for_stored(stored)
        assert stored.read_bytes() == results.read_bytes()
        assert json.loads(stored.read_text())["restarts"] == metrics["restarts"] != []
        status = json.loads(local_env.ok("status", "--name", name, "--json").out)
        assert [n["name"] for n in status["nodes"] if n["replaced"]] == ["node1"]
    finally:
        local_env.cli("down", "--name", name)
    assert leftovers(local_env, name)["namespaces"] == []


def test_a_noticed_worker_is_replaced_ahead_with_the_next_job_started_and_no_step_is_lost(
        local_env: LocalEnv, warm_image: str) -> None:
    """On a notice (the local nodes' notice file) the agent launches the replacement while the ranks train on,
    starts the next job ahead, then stops the ranks at a step boundary. The stand-in's sweep test gives one
    run five notices."""
    name = "e2enotice"
    local_env.ok("up", "--name", name, "--nodes", "2")
    try:
        local_env.ok("train", "squad", "--name", name, "--demo", "--run", "noticed", "--detach", "--",
                     "--max-steps", str(NOTICED_STEPS), "--save-steps", str(SAVE_STEPS))
        runs = local_env.home / "clusters" / name / "runs" / "noticed"
        log = runs / "train.log"
        deadline = time.monotonic() + 600
        while (json.loads((runs / "run.json").read_text()) if (runs / "run.json").exists() else {}).get("step", 0) < 20:
            assert time.monotonic() < deadline, "the run never reached step 20"
            time.sleep(0.5)
        worker = "node1"
        for count in range(1, NOTICES + 1):
            notice = json.dumps({"reason": "test notice", "deadline": time.time() + 120})
            local_env.ok("exec", "--name", name, "--node", worker, "--", f"echo '{notice}' > ~/xeoncluster/notice")
            worker = replaced(runs / "run.json", count, worker)
        record = wait_for_end(local_env, name, "noticed")
        assert record["state"] == "succeeded" and record["restarts"] == NOTICES, record
        # Every rank of the last launch said where its start went (issue 38).
        assert [r["rank"] for r in record["startup"]] == [0, 1], record["startup"]
        assert all(r["parts"]["libraries"] > 0 and r["node"] for r in record["startup"]), record["startup"]
        text = log.read_text()
        assert "agent: rank 1 on 10.214.0." in text and "node2 is ready to replace the noticed node" in text
        local_env.ok("logs", "noticed", "--name", name)
        metrics = json.loads((local_env.home / "results" / name / "noticed" / "metrics.json").read_text())
        first, *later = metrics["restarts"]
        assert (first["node"], first["replacement"], first["lost_steps"]) == ("node1", "node2", 0)
        assert len(later) == NOTICES - 1 and all(r["kind"] == "interruption" and r["lost_steps"] == 0
                                                 for r in metrics["restarts"]), metrics["restarts"]
        assert first["prepare_seconds"] > 0  # the relaunch's parts: the agent's, then rank 0's
        assert "agent: relaunched: rank 0 was ready to train " in text and " (python " in text
        # Each swap's job was started ahead and held while the old one trained on (issue 38).
        assert text.count("agent: released the job started ahead on ") == NOTICES, text[-3000:]
        assert "ahead of it and waited " in text and all("held" in r["parts"] for r in record["startup"]), text[-3000:]
        # node2 tokenized while node1 still trained: its resumed rank only loads the features.
        assert "[1] features loaded from cache" in text.split("agent: restart:", 1)[1], text[-3000:]
        assert metrics["lost_steps"] == 0 and metrics["global_steps"] == NOTICED_STEPS
        assert [n["name"] for n in local_env.state(name)["nodes"]] == ["node0", worker]
    finally:
        local_env.cli("down", "--name", name, "--force")
    assert leftovers(local_env, name)["namespaces"] == []


def replaced(record: Path, count: int, noticed: str, timeout: float = 300) -> str:
    """The name of the node that replaced `noticed`, once the run's record holds its `count`th restart."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = json.loads(record.read_text()) if record.exists() else {}
        restarts = found.get("restarts", [])
        if len(restarts) >= count:
            assert restarts[count - 1]["node"] == noticed, restarts
            return str(restarts[count - 1]["replacement"])
        assert found.get("state") not in ("succeeded", "failed", "cancelled"), \
            f"the run ended after {len(restarts)} notice(s): {found}"
        time.sleep(0.5)
    raise AssertionError(f"no replacement for {noticed} within {timeout}s")


def test_max_interruptions_0_keeps_the_one_line_failure(local_env: LocalEnv, warm_image: str) -> None:
    name = "e2enorec"
    local_env.ok("up", "--name", name, "--nodes", "2")
    try:
        proc = start_training(local_env, name, "norec", "--max-interruptions", "0")
        wait_for_step(local_env, name, "norec", 20, proc)
        lose_node(name, "node1")
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode != 0
        line = out.strip().splitlines()[-1]
        assert line.startswith("error: ") and "node1" in line and "log: " in line, out[-3000:]
        assert "--max-interruptions 0 spent" in line, out[-3000:]
        assert "restart:" not in out
    finally:
        local_env.cli("down", "--name", name)


def test_up_grows_a_running_cluster_and_train_uses_every_node(local_env: LocalEnv, warm_image: str) -> None:
    name = "e2egrow"
    local_env.ok("up", "--name", name, "--nodes", "2")
    try:
        grown = local_env.ok("up", "--name", name, "--nodes", "3")
        assert "added node2" in grown.out
        local_env.ok("exec", "--name", name, "--node", "node0", "--", "ssh", "node2", "true")
        local_env.ok("train", "squad", "--name", name, "--demo", "--run", "three", "--", "--max-steps", "20",
                     timeout=900)
        metrics = json.loads((local_env.home / "results" / name / "three" / "metrics.json").read_text())
        assert metrics["world_size"] == 3
        again = local_env.ok("up", "--name", name)
        assert "nothing to do" in again.err
    finally:
        local_env.cli("down", "--name", name)
    assert leftovers(local_env, name)["namespaces"] == []
