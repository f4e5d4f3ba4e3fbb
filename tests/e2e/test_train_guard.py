"""`train` on a real cluster: the run's agent owns it (a second train queues, `up` or `down` is refused,
`down --force` ends it; sweeps queue one run per value; Ctrl-C only detaches, `cancel` stops it), and
`--resume` continues the right run or refuses."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import interruptible
from tests.e2e.conftest import LocalEnv, leftovers
from tests.e2e.test_recovery import wait_for_end
from tests.e2e.test_train import results_dir, run_dir

# The rank is stopped once the run passes step 150, after its checkpoint-100; 450 leaves a loaded run about a
# minute of steps to reach that, and the resume from 100 or 200 trains on to the end.
STALL_STEPS = 450


@pytest.fixture(scope="module")
def guard_cluster(local_env: LocalEnv, warm_image: str) -> Iterator[str]:
    local_env.ok("up", "--name", "e2eguard", "--nodes", "2")
    yield "e2eguard"
    local_env.cli("down", "--name", "e2eguard", "--force")


def start_train(env: LocalEnv, cluster: str, run: str, steps: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "xeoncluster.cli", "--config", str(env.config), "train", "squad", "--name", cluster,
         "--demo", "--run", run, *extra, "--", "--max-steps", str(steps), "--no-eval-before"],
        env={**os.environ, "XEONCLUSTER_HOME": str(env.home)}, cwd=env.base,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)


def wait_for_steps(env: LocalEnv, cluster: str, run: str, proc: subprocess.Popen[str]) -> Path:
    log = run_dir(env, cluster, run) / "train.log"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and re.search(r"^\[\d+\] step \d+", log.read_text(), re.M):
            return log
        time.sleep(0.3)
    out, err = proc.communicate() if proc.poll() is not None else ("", "")
    raise AssertionError(f"run {run} logged no training step: {out}{err}")


def error_line(err: str) -> str:
    """The one `error:` line; progress lines may come before it on stderr."""
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.strip().endswith(errors[0]), err
    return errors[0]


def cluster_ranks(cluster: str) -> list[int]:
    """`python -m xeoncluster.node` processes in this cluster's namespaces (other tests here may train too)."""
    found = []
    for node in ("node0", "node1"):
        pids = subprocess.run(["ip", "netns", "pids", f"xc-{cluster}-{node}"], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"-m" in cmdline and b"xeoncluster.node" in cmdline:
                found.append(int(pid))
    return found


def no_ranks_left(cluster: str, wait: float = 30) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and cluster_ranks(cluster):
        time.sleep(0.2)
    return not cluster_ranks(cluster)


def runs_json(env: LocalEnv, cluster: str, *extra: str) -> dict[str, dict]:
    return {r["run"]: r for r in json.loads(env.ok("runs", "--name", cluster, "--json", *extra).out)}


def test_a_second_train_queues_while_up_and_down_are_refused(local_env: LocalEnv, guard_cluster: str) -> None:
    """A busy cluster queues the next run (its place said), `cancel` takes a queued run out of the
    queue, `up` and `down` are refused while anything is active or queued, and the queued run starts
    once the active one ends, with no CLI attached."""
    proc = start_train(local_env, guard_cluster, "busy-a", 400)
    try:
        wait_for_steps(local_env, guard_cluster, "busy-a", proc)
        queued = local_env.ok("train", "squad", "--demo", "--name", guard_cluster, "--run", "busy-b", "--detach",
                              "--", "--max-steps", "5", "--no-eval-before")
        assert "run busy-b queued: 2nd in line, after busy-a" in queued.out + queued.err
        local_env.ok("train", "squad", "--demo", "--name", guard_cluster, "--run", "busy-c", "--detach",
                     "--", "--max-steps", "5", "--no-eval-before")
        again = local_env.cli("train", "squad", "--demo", "--name", guard_cluster, "--run", "busy-c", "--detach")
        assert again.code == 2 and "run busy-c is already queued" in error_line(again.err)
        listed = runs_json(local_env, guard_cluster)
        assert (listed["busy-b"]["state"], listed["busy-b"]["place"]) == ("queued", 2)
        assert (listed["busy-c"]["state"], listed["busy-c"]["place"]) == ("queued", 3)
        for args in (("up", "--nodes", "2"), ("down",)):
            result = local_env.cli(*args, "--name", guard_cluster)
            assert result.code == 1, f"{args}: {result.out}{result.err}"
            line = error_line(result.err)
            assert f"cluster '{guard_cluster}' is busy: run busy-a is running" in line, line
            assert f"xeoncluster cancel busy-a --name {guard_cluster}" in line
        assert "2 queued: busy-b, busy-c" in line and "--force" in line
        cancelled = local_env.ok("cancel", "busy-b", "--name", guard_cluster)
        assert "run busy-b: cancelled" in cancelled.out and "--resume" not in cancelled.out
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out + err
    finally:
        if proc.poll() is None:
            proc.kill()
    followed = local_env.ok("logs", "busy-c", "-f", "--name", guard_cluster)
    assert "run busy-c: succeeded" in followed.out
    listed = runs_json(local_env, guard_cluster)
    assert listed["busy-b"]["state"] == "cancelled" and listed["busy-b"]["started_at"] is None
    assert listed["busy-c"]["started_at"] >= listed["busy-a"]["ended_at"]


def rank_in(cluster: str, node: str) -> int:
    pids = subprocess.run(["ip", "netns", "pids", f"xc-{cluster}-{node}"], capture_output=True, text=True).stdout
    for pid in pids.split():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-m" in cmdline and b"xeoncluster.node" in cmdline:
            return int(pid)
    raise AssertionError(f"no rank on {node}")


def trainer_in(cluster: str, node: str) -> int:
    """The process that trains on `node`: a rank forked from the node's warm server (xeoncluster/node/warm_start,
    named xc-rank-N) if there is one, else the rank MPI started, which then trains itself."""
    pids = subprocess.run(["ip", "netns", "pids", f"xc-{cluster}-{node}"], capture_output=True, text=True).stdout
    for pid in pids.split():
        try:
            if Path(f"/proc/{pid}/comm").read_text().startswith("xc-rank-"):
                return int(pid)
        except OSError:
            continue
    return rank_in(cluster, node)


def test_a_rank_that_stops_stepping_is_caught_and_the_run_resumes(local_env: LocalEnv, guard_cluster: str) -> None:
    """SIGSTOP on node1's rank: node0's rank waits in its all-reduce for good. With --stall-minutes 0.25
    the agent saves the stacks, restarts from the newest checkpoint on the same nodes, and the run
    succeeds. Meanwhile `runs --json` shows the pace, the projected cost and each node's use change."""
    local_env.ok("train", "squad", "--demo", "--name", guard_cluster, "--run", "stall", "--detach",
                 "--stall-minutes", "0.25", "--", "--max-steps", str(STALL_STEPS), "--save-steps", "100",
                 "--no-eval-before")
    seen: list[dict] = []
    deadline = time.monotonic() + 300
    while len({json.dumps(r["usage"], sort_keys=True) for r in seen if r["usage"]}) < 2 or \
            seen[-1]["step"] < 150:
        assert time.monotonic() < deadline, seen[-1:]
        seen.append(runs_json(local_env, guard_cluster)["stall"])
        time.sleep(2)
    live = seen[-1]
    assert set(live["usage"]) == {"node0", "node1"}, live
    assert all(0 <= use["cpu_percent"] <= 100 and use["mem_percent"] > 0 for use in live["usage"].values())
    assert live["live"]["eta_seconds"] is not None and live["live"]["projected_cost_usd"] is not None
    assert live["live"]["loss"] is not None and live["live"]["steps_per_second"] > 0
    table = local_env.ok("runs", "--name", guard_cluster).out
    assert "node0 cpu" in table and "projected at the end" in table
    os.kill(trainer_in(guard_cluster, "node1"), signal.SIGSTOP)
    followed = local_env.cli("logs", "stall", "-f", "--name", guard_cluster, timeout=600)
    assert followed.code == 0, followed.out + followed.err
    assert "the run stalled: no step for" in followed.out and "restart: stalled:" in followed.out
    record = runs_json(local_env, guard_cluster)["stall"]
    assert record["state"] == "succeeded" and record["restarts"] == 1 and record["step"] == STALL_STEPS, record
    stacks = list((run_dir(local_env, guard_cluster, "stall") / "stacks").glob("node*-rank-*.txt"))
    assert any("most recent call first" in path.read_text() for path in stacks), stacks
    assert no_ranks_left(guard_cluster)


def test_a_sweep_runs_in_order_with_no_cli_and_compares(local_env: LocalEnv, guard_cluster: str) -> None:
    sweep = ["train", "squad", "--demo", "--name", guard_cluster, "--run", "lrs", "--sweep", "lr=1e-4,3e-4,1e-3"]
    dry = local_env.ok(*sweep, "--dry-run", "--", "--max_steps", "30", "--no-eval-before")
    assert "3 runs would be queued" in dry.out and "lrs-3" in dry.out and "--lr 1e-3" in dry.out
    for bad, why in ((("--sweep", "lr="), "empty or repeated value"), (("--sweep", "lr=1,2", "--sweep", "lr=3"),
                                                                       "given twice")):
        result = local_env.cli("train", "squad", "--demo", "--name", guard_cluster, *bad)
        assert result.code == 2 and why in error_line(result.err), result.err
    local_env.ok(*sweep, "--detach", "--", "--max_steps", "30", "--no-eval-before")  # the CLI is gone at once
    for i in (1, 2, 3):
        wait_for_end(local_env, guard_cluster, f"lrs-{i}", timeout=600)
    listed = runs_json(local_env, guard_cluster)
    runs = [listed[f"lrs-{i}"] for i in (1, 2, 3)]
    assert [r["state"] for r in runs] == ["succeeded"] * 3, runs
    assert runs[1]["started_at"] >= runs[0]["ended_at"] and runs[2]["started_at"] >= runs[1]["ended_at"]
    assert [r["params"] for r in runs] == [{"lr": "1e-4"}, {"lr": "3e-4"}, {"lr": "1e-3"}]
    compared = json.loads(local_env.ok("runs", "--name", guard_cluster, "--compare", "lrs", "--json").out)
    assert [(c["run"], c["params"]["lr"]) for c in compared] == [("lrs-1", "1e-4"), ("lrs-2", "3e-4"),
                                                                  ("lrs-3", "1e-3")]
    assert all({"exact_match", "f1"} <= set(c["final"]) and c["steps"] == 30 for c in compared), compared
    assert len({c["train_loss"] for c in compared}) == 3, "each run trained with its own learning rate"
    table = local_env.ok("runs", "--name", guard_cluster, "--compare", "lrs-1", "lrs-3").out
    assert "lrs-1" in table and "lrs-3" in table and "lrs-2" not in table
    unknown = local_env.cli("runs", "--name", guard_cluster, "--compare", "nosuch")
    assert unknown.code == 2 and "no run or sweep 'nosuch'" in error_line(unknown.err)


def agents_of(env: LocalEnv, cluster: str) -> list[int]:
    """This machine's run agents of the cluster (local nodes: the agent is a process here)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"xeoncluster.agent" in argv and cluster.encode() in argv and \
                f"XEONCLUSTER_HOME={env.home}".encode() in environ:
            found.append(int(proc.name))
    return found


def test_down_force_during_train_ends_the_run_and_leaves_nothing(local_env: LocalEnv, warm_image: str) -> None:
    name = "e2eforce"
    local_env.ok("up", "--name", name, "--nodes", "2")
    proc = start_train(local_env, name, "forced", 5000)
    try:
        wait_for_steps(local_env, name, "forced", proc)
        assert agents_of(local_env, name)
        local_env.ok("down", "--name", name, "--force")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, out + err
        line = error_line(err)
        assert "no run 'forced' on cluster 'e2eforce' any more: the cluster was removed while it ran" in line, line
        assert leftovers(local_env, name) == {"namespaces": [], "processes": [], "mounts": [], "files": []}
        assert agents_of(local_env, name) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        local_env.cli("down", "--name", name, "--force")


def test_resume_without_a_run_or_checkpoint_is_refused(local_env: LocalEnv, guard_cluster: str) -> None:
    runs = local_env.home / "clusters" / guard_cluster / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    for args, expected in ((("glue", "--resume"), "no earlier glue run on cluster"),
                           (("squad", "--run", "nosuch", "--resume"), "no run 'nosuch' on node0 (master)")):
        result = local_env.cli("train", *args, "--demo", "--name", guard_cluster)
        assert result.code == 2, result.out + result.err
        assert expected in error_line(result.err), result.err
    local_env.ok("train", "squad", "--demo", "--name", guard_cluster, "--run", "nockpt", "--",
                 "--max-steps", "5", "--no-eval-before")
    result = local_env.cli("train", "squad", "--demo", "--name", guard_cluster, "--run", "nockpt", "--resume")
    assert result.code == 2 and "run 'nockpt' has no checkpoint on node0 (master)" in error_line(result.err)
    assert "starting fresh" not in result.out + result.err
    assert set(runs.iterdir()) - before == {runs / "nockpt"}


def test_resume_continues_the_newest_run_of_the_task_whatever_its_name(local_env: LocalEnv,
                                                                        guard_cluster: str) -> None:
    common = ["train", "squad", "--demo", "--name", guard_cluster]
    local_env.ok(*common, "--run", "my-own-name", "--", "--max-steps", "20", "--save-steps", "10",
                 "--no-eval-before")
    result = local_env.ok(*common, "--resume", "--", "--max-steps", "30", "--save-steps", "10", "--no-eval-before")
    assert "run my-own-name:" in result.out + result.err
    metrics = json.loads((results_dir(local_env, guard_cluster, "my-own-name") / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == 20 and metrics["global_steps"] == 30


def test_env_values_reach_the_ranks_but_no_argv_log_or_launch_json(local_env: LocalEnv, guard_cluster: str) -> None:
    secret = "hf_e2e-s3cr3t-value"
    args = ["train", "squad", "--demo", "--name", guard_cluster, "--run", "envrun", "--env", f"XC_E2E_TOKEN={secret}",
            "--env", "OMP_NUM_THREADS=2"]
    dry = local_env.ok(*args, "--dry-run")
    assert secret not in dry.out + dry.err and "XC_E2E_TOKEN=<redacted>" in dry.out
    result = local_env.ok(*args, "--", "--max-steps", "2", "--no-eval-before")
    assert secret not in result.out + result.err
    folder = run_dir(local_env, guard_cluster, "envrun")
    for path in [*folder.rglob("*"), *results_dir(local_env, guard_cluster, "envrun").rglob("*")]:
        if path.is_file() and path.name != "env":
            assert secret.encode() not in path.read_bytes(), path
    # The agent kept the values for restarts in a file only the owner could read, and removed it with the run.
    assert not (folder / "env").exists()
    assert json.loads((folder / "launch.json").read_text())["env"]["XC_E2E_TOKEN"] == "<redacted>"
    assert "export OMP_NUM_THREADS=1" in dry.out, "planned: one thread per single-CPU node"
    metrics = json.loads((results_dir(local_env, guard_cluster, "envrun") / "metrics.json").read_text())
    assert metrics["threads_per_rank"] == 2, "the file's values reach ranks"
    check = f"test -e ~/xeoncluster/runs/envrun/env && echo kept; grep -rlc {secret} ~/xeoncluster || echo clean"
    out = local_env.ok("exec", "--name", guard_cluster, "--", check).out
    assert sorted(line.replace(" ", "") for line in out.splitlines()) == ["node0|clean", "node1|clean"]


def test_ctrl_c_detaches_and_cancel_stops_the_run_with_a_checkpoint(local_env: LocalEnv,
                                                                      guard_cluster: str) -> None:
    proc = start_train(local_env, guard_cluster, "intr", 5000, "--offline")
    try:
        wait_for_steps(local_env, guard_cluster, "intr", proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert (f"detached: run intr goes on on the cluster; follow it with `xeoncluster logs intr -f --name "
            f"{guard_cluster}`, stop it with `xeoncluster cancel intr --name {guard_cluster}`") in out
    time.sleep(2)
    assert cluster_ranks(guard_cluster), "the run goes on without the CLI"
    cancelled = local_env.ok("cancel", "--name", guard_cluster)
    assert "run intr: cancelled, step " in cancelled.out and "--run intr --resume" in cancelled.out
    assert no_ranks_left(guard_cluster)
    [record] = [r for r in json.loads(local_env.ok("runs", "--name", guard_cluster, "--json").out)
                if r["run"] == "intr"]
    assert record["state"] == "cancelled"
    again = local_env.cli("cancel", "intr", "--name", guard_cluster)
    assert again.code == 2 and "run intr has already cancelled" in error_line(again.err)
    again = local_env.cli("train", "squad", "--demo", "--name", guard_cluster, "--run", "after-intr", "--",
                          "--max-steps", "2", "--no-eval-before")
    assert again.code == 0, again.err
