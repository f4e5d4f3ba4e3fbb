"""A run killed with SIGKILL after its first checkpoint continues from it with --resume, whether its
checkpoints are written in the step or in the background (a write the kill cuts short is skipped)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .training_helpers import REPO, offline_env

TOTAL_STEPS = 60
SAVE_STEPS = 10


def _command(demo_dir: Path, out: Path, resume: bool, save: str) -> list[str]:
    return [
        sys.executable, "-m", "xeoncluster.node", "squad",
        "--demo", str(demo_dir),
        "--output-dir", str(out),
        "--cache-dir", str(out.parent / "cache"),
        "--max-train-samples", "400",
        "--no-eval-before",
        "--max-eval-samples", "20",
        "--batch-size", "8",
        "--max-steps", str(TOTAL_STEPS),
        "--save-steps", str(SAVE_STEPS),
        save,
        *(["--resume"] if resume else []),
    ]


def _complete_checkpoints(out: Path) -> list[int]:
    return sorted(
        int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "trainer_state.json").is_file()
    )


def _wait_for_first_checkpoint(process: subprocess.Popen, out: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _complete_checkpoints(out):
        assert process.poll() is None, "training ended before writing a checkpoint"
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("save", ["--no-async-save", "--async-save"])
def test_sigkill_then_resume_continues_from_the_checkpoint(demo_dir: Path, tmp_path: Path, save: str) -> None:
    out = tmp_path / "run"
    first = subprocess.Popen(
        _command(demo_dir, out, resume=False, save=save), cwd=REPO, env=offline_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        _wait_for_first_checkpoint(first, out, timeout=150)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert not (out / "metrics.json").exists(), "the first run finished before it was killed"
    checkpoint = _complete_checkpoints(out)[-1]
    assert checkpoint < TOTAL_STEPS

    second = subprocess.run(
        _command(demo_dir, out, resume=True, save=save), cwd=REPO, env=offline_env(),
        capture_output=True, text=True, timeout=200,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resuming from {out / f'checkpoint-{checkpoint}'}" in second.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == checkpoint
    assert metrics["global_steps"] == TOTAL_STEPS
    assert (out / "model" / "config.json").is_file() and (out / "model" / "tokenizer.json").is_file()
    assert len(list(out.glob("checkpoint-*"))) <= 2  # save_total_limit
