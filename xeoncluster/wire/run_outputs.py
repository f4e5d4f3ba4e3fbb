"""What of a run's folder on the master is its output (fetched back and kept in storage), and what
is the run's own machinery or its checkpoints (which storage keeps as checkpoints)."""
from __future__ import annotations

# The built-in tasks' results, each written only when the run had something to put in it.
TASK_RESULTS = ("metrics.json", "predictions.json", "null_odds.json", "loss.png")
# The agent's final metrics.json while it is written, renamed over metrics.json once whole.
FINAL_METRICS_TMP = ".xc-metrics.json"
# tensorboard/: the ranks' TensorBoard files, which storage keeps (and `xeoncluster tensorboard` fetches) apart.
# .xc-ahead/: a job started ahead of a swap (agent/prestart.py): its hostfile, pid file and release.
INTERNAL = ("env", "stop-request", "launcher.pid", "progress.json", ".xc-storage", ".xc-storage.tar",
            ".xc-results.tar.gz", "model.tar.gz", FINAL_METRICS_TMP, "tensorboard", ".xc-ahead")


def is_output(name: str) -> bool:
    """A top-level entry of the run's folder that a user's script left there as its output."""
    return not name.startswith("checkpoint-") and not name.startswith("tmp-checkpoint-") and name not in INTERNAL


def tar_excludes() -> tuple[str, ...]:
    """GNU tar options (argv words) that leave everything but the output out of `tar -C RUN_DIR ... .`."""
    patterns = ["./checkpoint-*", "./tmp-checkpoint-*", *(f"./{name}" for name in INTERNAL)]
    return ("--anchored", *(f"--exclude={p}" for p in patterns))
