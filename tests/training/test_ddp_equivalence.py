"""Two MPI ranks with batch b train exactly like one process with batch 2b.

Why they match: the model is loaded from the same files with dropout set to 0; the sampler is
sequential (`--train_sampling_strategy sequential`), and accelerate shards batches so that at step k
rank 0 gets samples [2kb, 2kb+b) and rank 1 gets [2kb+b, 2kb+2b) -- together exactly the 1-rank batch
[2kb, 2kb+2b). The QA loss is a per-sample mean, so the DDP average of the two rank gradients equals
the 1-rank gradient, and the logged loss is the mean over ranks. Only float summation order differs,
so per-step losses must agree within rtol 1e-3 (observed relative differences are below 1e-6).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from .training_helpers import REPO, offline_env

STEPS = 6
RANK_BATCH = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _no_dropout_model(demo_dir: Path, target: Path) -> Path:
    shutil.copytree(demo_dir / "model", target)
    config = json.loads((target / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (target / "config.json").write_text(json.dumps(config))
    return target


def _args(model: Path, data: Path, out: Path, batch: int) -> list[str]:
    return [
        "-m", "xeoncluster.node", "squad",
        "--model", str(model),
        "--train-file", str(data),
        "--output-dir", str(out),
        "--cache-dir", str(out / "cache"),
        "--max-train-samples", "64",
        "--max-seq-length", "64", "--doc-stride", "24",
        "--batch-size", str(batch),
        "--max-steps", str(STEPS),
        "--lr", "1e-3",
        "--seed", "0",
        "--precision", "fp32",
        "--logging_steps", "1",
        "--train_sampling_strategy", "sequential",
    ]


def _losses(out: Path) -> list[float]:
    history = json.loads((out / "metrics.json").read_text())["log_history"]
    assert [h["step"] for h in history] == list(range(1, STEPS + 1))
    return [h["loss"] for h in history]


def test_two_mpi_ranks_match_one_rank_with_double_batch(demo_dir: Path, tmp_path: Path) -> None:
    model = _no_dropout_model(demo_dir, tmp_path / "model")
    data = demo_dir / "squad" / "train.json"
    mpiexec = Path(sys.executable).parent / "mpiexec.hydra"
    env = offline_env(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    two = subprocess.Popen(
        [str(mpiexec), "-n", "2", sys.executable, *_args(model, data, tmp_path / "two", RANK_BATCH)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    one = subprocess.run(
        [sys.executable, *_args(model, data, tmp_path / "one", 2 * RANK_BATCH)],
        cwd=REPO, env=offline_env(OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=180,
    )
    two_output, _ = two.communicate(timeout=180)
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two_output[-3000:]

    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert (metrics["world_size"], metrics["ranks_per_node"], metrics["ddp_backend"]) == (2, 2, "gloo")
    assert metrics["global_steps"] == STEPS
    # Tokenized once per node: local rank 0 builds the cache, rank 1 loads it.
    assert "[0] features tokenized into cache" in two_output
    assert "[1] features loaded from cache" in two_output
    np.testing.assert_allclose(_losses(tmp_path / "two"), _losses(tmp_path / "one"), rtol=1e-3)
