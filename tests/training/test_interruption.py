"""A notice stops training cleanly: every rank stops after the same step, a checkpoint of that step is
saved, and resuming from it continues the loss curve an uninterrupted run has (2 real MPI ranks), with
checkpoints written in the step or in the background (--async-save: the ranks exit only once it is written).

Dropout stays on: the resumed ranks must get back their own RNG states, which every node's checkpoint
holds for every rank (node_checkpoint.SharedRngStates)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from xeoncluster.node.checkpoints.resume_point import is_complete
from xeoncluster.node.diagnostics.startup_clock import read_parts

from .test_ddp_equivalence import _free_port
from .training_helpers import REPO, events_in, offline_env

STEPS = 14
EXIT_INTERRUPTED = 75


def _command(demo_dir: Path, out: Path, resume: bool, save: str = "--no-async-save") -> list[str]:
    mpiexec = Path(sys.executable).parent / "mpiexec.hydra"
    return [str(mpiexec), "-n", "2", sys.executable, "-m", "xeoncluster.node", "squad",
            "--model", str(demo_dir / "model"), "--train-file", str(demo_dir / "squad" / "train.json"),
            "--output-dir", str(out), "--cache-dir", str(out.parent / f"{out.name}-cache"),
            "--max-train-samples", "64", "--max-seq-length", "64", "--doc-stride", "24",
            "--batch-size", "4", "--max-steps", str(STEPS), "--save-steps", "1000", "--seed", "0",
            "--precision", "fp32", "--no-eval-before", "--logging_steps", "1", save, *(["--resume"] if resume else [])]


def _env(stop_file: Path) -> dict[str, str]:
    return offline_env(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                       XC_STOP_FILE=str(stop_file), XC_NOTICE_INTERVAL="0.2")


def _losses(out: Path) -> dict[int, float]:
    history = json.loads((out / "metrics.json").read_text())["log_history"]
    return {h["step"]: h["loss"] for h in history}


def _step(out: Path) -> int:
    try:
        return int(json.loads((out / "progress.json").read_text())["step"])
    except (OSError, ValueError):
        return 0


@pytest.fixture(scope="module")
def uninterrupted(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    root = tmp_path_factory.mktemp("plain")
    plain = subprocess.run(_command(demo_dir, root / "plain", False), cwd=REPO, env=_env(root / "never"),
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    return _losses(root / "plain")


@pytest.mark.parametrize("save", ["--no-async-save", "--async-save"])
def test_a_notice_checkpoints_the_current_step_and_resume_continues_exactly(
        demo_dir: Path, tmp_path: Path, uninterrupted: dict[int, float], save: str) -> None:
    out, stop = tmp_path / "stopped", tmp_path / "stop-request"
    first = subprocess.Popen(_command(demo_dir, out, False, save), cwd=REPO, env=_env(stop),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while _step(out) < 4 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    noticed_at = _step(out)
    stop.touch()
    output, _ = first.communicate(timeout=240)
    assert first.returncode == EXIT_INTERRUPTED, output[-3000:]
    stopped = int(output.split("stopped at step ")[1].split()[0])
    assert 4 <= noticed_at <= stopped < STEPS, output[-2000:]
    assert _step(out) - stopped <= 1  # steps done after the checkpoint: lost to the interruption
    checkpoint = out / f"checkpoint-{stopped}"
    assert is_complete(checkpoint)
    assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    reported = [(e.kind, e.step) for e in events_in(output) if e.kind != "step"]
    assert reported[-2:] == [("checkpoint", stopped), ("stopped", stopped)]  # the agent stores it, then stops
    assert not (out / "metrics.json").exists()

    stop.unlink()
    resumed = subprocess.run(_command(demo_dir, out, True, save), cwd=REPO, env=_env(stop), capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"resuming from {checkpoint}" in resumed.stdout
    [started] = [e for e in events_in(resumed.stdout) if e.kind == "started"]
    parts = read_parts(started.metrics)  # where the relaunch went, for the agent's log and bench_recovery
    assert started.step == stopped and list(parts)[-1] == "resume", started
    assert {"libraries", "data", "torch", "process_group", "model", "features", "trainer"} <= set(parts)
    assert all(seconds >= 0 for seconds in parts.values())
    after = _losses(out)
    expected = uninterrupted
    steps = sorted(s for s in after if s > stopped)
    assert steps and steps[-1] == STEPS
    np.testing.assert_allclose([after[s] for s in steps], [expected[s] for s in steps], rtol=1e-3)
