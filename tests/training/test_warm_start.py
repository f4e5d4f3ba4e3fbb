"""Warm rank starts (xeoncluster/node/warm_start), with real mpiexec, real torch and real servers on this
machine: a rank forked from a node's server trains exactly as a cold one, in a fraction of the start; the
rank process MPI started stays the rank's face (its exit code, its death); another import environment gets
a server of its own."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from xeoncluster.node.warm_start.key import fingerprint, import_env
from xeoncluster.node.warm_start.server import running

from .test_ddp_equivalence import _free_port
from .training_helpers import REPO, events_in, offline_env

TAG = "WARM_TEST_TAG"  # not a per-launch name (XC_* are): part of the servers' environment, so these tests' own


def command(demo_dir: Path, out: Path, *extra: str, steps: int = 3, ranks: int = 2) -> list[str]:
    mpiexec = Path(sys.executable).parent / "mpiexec.hydra"
    return [str(mpiexec), "-n", str(ranks), sys.executable, "-m", "xeoncluster.node", "squad",
            "--model", str(demo_dir / "model"), "--train-file", str(demo_dir / "squad" / "train.json"),
            "--output-dir", str(out), "--cache-dir", str(out.parent / "cache"), "--max-train-samples", "64",
            "--max-seq-length", "64", "--doc-stride", "24", "--batch-size", "4", "--max-steps", str(steps),
            "--save-steps", "1000", "--seed", "0", "--precision", "fp32", "--no-eval-before",
            "--logging_steps", "1", *extra]


def servers(tag: str) -> list[int]:
    return [server.pid for server in running() if tag.encode() in server.environ]


def forked_ranks(server_pids: list[int]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        parent = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:"))
        if parent in server_pids:
            found.append(int(entry.name))
    return found


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of these ranks: their servers are found by it, and end with the test."""
    tag = f"{TAG}={uuid.uuid4().hex}"
    yield offline_env(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", **{TAG: tag.split("=", 1)[1]})
    for pid in servers(tag):
        os.kill(pid, signal.SIGKILL)


def launch(demo_dir: Path, out: Path, env: dict[str, str], *extra: str, ranks: int = 2, **changes: str
           ) -> subprocess.CompletedProcess[str]:
    env = {**env, "MASTER_PORT": str(_free_port()), **changes}
    return subprocess.run(command(demo_dir, out, *extra, ranks=ranks), cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def started(out: str) -> dict[str, float]:
    for event in events_in(out):
        if event.kind == "started":
            return {k: float(v) for k, v in event.metrics.items() if v is not None}
    raise AssertionError(f"no started event in:\n{out[-3000:]}")


def losses(out: Path) -> list[float]:
    return [h["loss"] for h in json.loads((out / "metrics.json").read_text())["log_history"] if "loss" in h]


def tag_of(env: dict[str, str]) -> str:
    return f"{TAG}={env[TAG]}"


def test_a_forked_rank_trains_as_a_cold_one_in_a_fraction_of_the_start(demo_dir: Path, tmp_path: Path,
                                                                       warm: dict[str, str]) -> None:
    cold = launch(demo_dir, tmp_path / "cold", warm, XC_WARM_START="0")
    assert cold.returncode == 0, cold.stdout[-2000:] + cold.stderr[-2000:]
    assert not servers(tag_of(warm))
    first = launch(demo_dir, tmp_path / "first", warm)  # starts the servers: they import, then fork
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert servers(tag_of(warm))
    again = launch(demo_dir, tmp_path / "again", warm)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert losses(tmp_path / "again") == losses(tmp_path / "first") == losses(tmp_path / "cold")
    cold_start, warm_start = started(cold.stdout), started(again.stdout)
    assert warm_start["startup_libraries_s"] < 0.5 < cold_start["startup_libraries_s"], (cold_start, warm_start)
    assert warm_start["startup_python_s"] < 2, warm_start  # from the process MPI started, not the fork


def test_a_data_warm_up_under_mpi_leaves_the_server_the_next_job_s_rank_forks_from(demo_dir: Path, tmp_path: Path,
                                                                                 warm: dict[str, str]) -> None:
    """What the agent runs on a replacement while the run trains (Preparer.warm, LaunchPlan.warm_up): the rank's
    --warm-data as a rank of its own under mpiexec, with the launch's environment. It starts the node's server,
    and the next job's rank there, the replacement's first, starts forked instead of importing its libraries."""
    warmed = launch(demo_dir, tmp_path / "warm", warm, "--warm-data", ranks=1)
    assert warmed.returncode == 0, warmed.stdout[-2000:] + warmed.stderr[-2000:]
    assert "training features ready on this node" in warmed.stdout and not (tmp_path / "warm").exists()
    [server] = servers(tag_of(warm))
    trained = launch(demo_dir, tmp_path / "run", warm, ranks=1)
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]
    assert servers(tag_of(warm)) == [server]  # the same import environment: no server of its own
    assert started(trained.stdout)["startup_libraries_s"] < 0.5, started(trained.stdout)


def test_the_rank_mpi_started_ends_as_its_forked_rank_and_takes_it_along(demo_dir: Path, tmp_path: Path,
                                                                         warm: dict[str, str]) -> None:
    assert launch(demo_dir, tmp_path / "warmup", warm).returncode == 0
    mine = servers(tag_of(warm))
    assert mine
    bad = launch(demo_dir, tmp_path / "bad", warm, "--train-file", str(tmp_path / "missing.json"))
    cold_bad = launch(demo_dir, tmp_path / "bad-cold", warm, "--train-file", str(tmp_path / "missing.json"),
                      XC_WARM_START="0")
    assert bad.returncode == cold_bad.returncode != 0
    assert "missing.json" in bad.stderr + bad.stdout
    env = {**warm, "MASTER_PORT": str(_free_port())}
    job = subprocess.Popen(command(demo_dir, tmp_path / "long", steps=5000), cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert job.stdout is not None
        for line in job.stdout:
            if "step " in line:
                break
        ranks = forked_ranks(mine)
        assert len(ranks) == 2 and all(Path(f"/proc/{pid}/comm").read_text().startswith("xc-rank-")
                                       for pid in ranks), ranks
        for pid in mpi_started(env):
            os.kill(pid, signal.SIGKILL)
        assert job.wait(60) != 0
        assert gone(ranks, 20), [p for p in ranks if Path(f"/proc/{p}").exists()]
    finally:
        job.kill()
        job.wait()
    assert servers(tag_of(warm)) == mine  # still there for the next job


def mpi_started(env: dict[str, str]) -> list[int]:
    """The rank processes of the job started with `env` (its own MASTER_PORT)."""
    mark = f"MASTER_PORT={env['MASTER_PORT']}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if b"xeoncluster.node" in cmdline and mark in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def gone(pids: list[int], wait: float) -> bool:
    deadline = time.monotonic() + wait
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_another_import_environment_gets_a_server_of_its_own(demo_dir: Path, tmp_path: Path,
                                                             warm: dict[str, str]) -> None:
    assert launch(demo_dir, tmp_path / "one", warm).returncode == 0
    old = servers(tag_of(warm))
    other = launch(demo_dir, tmp_path / "two", warm, TRANSFORMERS_VERBOSITY="error")
    assert other.returncode == 0, other.stdout[-2000:] + other.stderr[-2000:]
    assert gone(old, 60)  # retired by the new ones: they end once idle
    new = servers(tag_of(warm))
    assert new and not set(new) & set(old)
    assert all(b"TRANSFORMERS_VERBOSITY=error" in Path(f"/proc/{pid}/environ").read_bytes() for pid in new)


def test_what_a_server_is_started_with_leaves_out_each_launch_s_own_values() -> None:
    rank = {"PATH": "/usr/bin", "OMP_NUM_THREADS": "4", "PMI_RANK": "1", "MASTER_PORT": "29500", "XC_RUN": "a",
            "SSH_CONNECTION": "10.0.0.1 22", "XDG_SESSION_ID": "7", "WANDB_RUN_ID": "xc-1"}
    assert import_env(rank) == {"PATH": "/usr/bin", "OMP_NUM_THREADS": "4"}
    other_launch = {**rank, "PMI_RANK": "0", "MASTER_PORT": "29501", "XC_RUN": "b", "XDG_SESSION_ID": "9"}
    assert fingerprint(rank) == fingerprint(other_launch)
    assert fingerprint(rank) != fingerprint({**rank, "OMP_NUM_THREADS": "2"})
    assert fingerprint(rank) != fingerprint({**rank, "LD_PRELOAD": "/usr/lib/libtcmalloc.so"})
