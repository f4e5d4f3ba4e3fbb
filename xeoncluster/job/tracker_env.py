"""The experiment trackers a run's ranks report to, kept on one tracker run per xeoncluster run.

- TensorBoard: the HF Trainer writes its scalars into the run's `tensorboard/` folder (its
  TensorBoardCallback reads TENSORBOARD_LOGGING_DIR), which travels to storage with the results.
- Weights & Biases: a run id that is the same for every launch of the run, and resume allowed, so a
  restart after a lost node continues the same W&B run instead of starting a new one.
- MLflow assigns its run ids itself: the ranks keep the first one in the output folder and hand it
  back on resume (xeoncluster/node/events/trackers.py).

A value the user passes with --env wins: the ranks load those after this environment.
"""
from __future__ import annotations

import hashlib

from xeoncluster.node.events.trackers import TENSORBOARD_DIR
from xeoncluster.wire.layout import RemoteLayout


def tracker_env(home: str, cluster: str, run: str) -> dict[str, str]:
    run_id = "xc-" + hashlib.sha256(f"{cluster}/{run}".encode()).hexdigest()[:16]
    return {"TENSORBOARD_LOGGING_DIR": f"{RemoteLayout(home).run_dir(run)}/{TENSORBOARD_DIR}",
            "WANDB_RUN_ID": run_id, "WANDB_RESUME": "allow"}
