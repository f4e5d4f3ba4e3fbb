"""Paths and an offline environment for running `python -m xeoncluster.node` in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from xeoncluster.node.events.events import EVENT_KEY_ENV, RunEvent, parse_line

REPO = Path(__file__).resolve().parents[2]
# Small real samples (GLUE MRPC in its original TSV, SQuAD v2 in the flat HF layout), shipped with the tests.
SHARED_DATA = REPO / "tests" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")


EVENT_KEY = "ab" * 32  # the key these tests' ranks sign their events with, as the agent's launches do


def events_in(output: str) -> list[RunEvent]:
    """The events among a run's output lines, rank labels and all."""
    return [e for e in (parse_line(line, EVENT_KEY) for line in output.splitlines()) if e is not None]


def offline_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_NO_ADVISORY_WARNINGS="1",
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    # Per test phase and per worker: the ranks' warm servers (xeoncluster/node/warm_start) would differ with them.
    for name in ("PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "RANK", "WORLD_SIZE", "LOCAL_RANK", "PMI_RANK",
                 "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "XC_STACK"):
        env.pop(name, None)
    # One OpenMP thread: these runs share 2 cores with the two chains' ranks, and a 2-thread process among
    # others measured 3.6x slower per step than a 1-thread one. A test may still ask for more.
    env.setdefault("OMP_NUM_THREADS", "1")
    env[EVENT_KEY_ENV] = EVENT_KEY  # what the agent hands each launch: the ranks sign their events with it
    env.update(extra)
    return env


def run_training(args: list[str], timeout: float = 240, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xeoncluster.node", *args],
        cwd=REPO,
        env=offline_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
