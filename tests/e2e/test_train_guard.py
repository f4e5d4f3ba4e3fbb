"""A running `train` owns its cluster: a second train, `up` or `down` is refused; `down --force` ends it."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.e2e.conftest import LocalEnv, leftovers
from tests.e2e.test_train import rank_processes, run_dir


@pytest.fixture(scope="module")
def guard_cluster(local_env: LocalEnv, warm_image: str) -> Iterator[str]:
    local_env.ok("up", "--name", "e2eguard", "--nodes", "2")
    yield "e2eguard"
    local_env.cli("down", "--name", "e2eguard", "--force")


def start_train(env: LocalEnv, cluster: str, run: str, steps: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "provisioner.cli", "--config", str(env.config), "train", "squad", "--name", cluster,
         "--demo", "--run", run, *extra, "--", "--max-steps", str(steps), "--no-eval-before"],
        env={**os.environ, "XEONCLUSTER_HOME": str(env.home)}, cwd=env.base,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_steps(env: LocalEnv, cluster: str, run: str, proc: subprocess.Popen[str]) -> Path:
    log = run_dir(env, cluster, run) / "train.log"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and re.search(r"^\[\d+\] step \d+", log.read_text(), re.M):
            return log
        time.sleep(0.3)
    out, err = proc.communicate() if proc.poll() is not None else ("", "")
    raise AssertionError(f"run {run} logged no training step: {out}{err}")


def no_ranks_left() -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (rank_processes(0) or rank_processes(1)):
        time.sleep(0.2)
    return not rank_processes(0) and not rank_processes(1)


def test_second_train_up_and_down_are_refused_while_a_run_holds_the_cluster(local_env: LocalEnv,
                                                                             guard_cluster: str) -> None:
    proc = start_train(local_env, guard_cluster, "busy-a", 300)
    try:
        wait_for_steps(local_env, guard_cluster, "busy-a", proc)
        for args in (("train", "squad", "--demo", "--run", "busy-b"), ("up", "--nodes", "2"), ("down",)):
            result = local_env.cli(*args, "--name", guard_cluster)
            assert result.code == 1, f"{args}: {result.out}{result.err}"
            line = result.err.strip()
            assert len(line.splitlines()) == 1, line
            assert f"cluster '{guard_cluster}' is busy: `train squad --run busy-a`" in line
        assert "--force" in line
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out + err
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not run_dir(local_env, guard_cluster, "busy-b").exists()


def test_down_force_during_train_names_the_lost_master(local_env: LocalEnv, warm_image: str) -> None:
    name = "e2eforce"
    local_env.ok("up", "--name", name, "--nodes", "2")
    proc = start_train(local_env, name, "forced", 5000)
    try:
        log = wait_for_steps(local_env, name, "forced", proc)
        local_env.ok("down", "--name", name, "--force")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, out + err
        line = err.strip().splitlines()[-1]
        assert "lost connection to node0 (master)" in line and "run forced" in line
        assert f"log: {log}" in line
        assert no_ranks_left()
        assert leftovers(local_env, name) == {"namespaces": [], "processes": [], "mounts": [], "files": []}
    finally:
        if proc.poll() is None:
            proc.kill()
        local_env.cli("down", "--name", name, "--force")
