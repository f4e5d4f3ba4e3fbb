"""The ranks' side of the trackers (xeoncluster/job/tracker_env.py has the launcher's): TensorBoard for the
built-in tasks and for a script's Trainer that reports nowhere, and MLflow's run id kept across
restarts of one run."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

TENSORBOARD_DIR = "tensorboard"
MLFLOW_RUN_ID_FILE = ".xc-mlflow-run-id"


def tensorboard_available() -> bool:
    return any(importlib.util.find_spec(name) is not None for name in ("tensorboard", "tensorboardX"))


def tensorboard_callback() -> Any:
    """The HF Trainer's TensorBoard callback, made durable: at each checkpoint its file is closed (so
    every scalar up to that step is on disk when the checkpoint is reported and stored) and the next
    log opens a new one. tensorboardX's own flush() leaves events its writer thread has not taken yet."""
    from transformers.integrations import TensorBoardCallback

    class CheckpointedTensorBoard(TensorBoardCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.tb_writer is not None:
                self.tb_writer.close()
                self.tb_writer = None

    return CheckpointedTensorBoard()


def add_tensorboard(trainer: Any) -> None:
    """Before the callbacks that report checkpoints: its on_save must come first."""
    trainer.args.report_to = ["tensorboard"]
    trainer.add_callback(tensorboard_callback())


def adds_tensorboard(args: Any) -> bool:
    """A script's Trainer that reports to nothing gets TensorBoard, into the run's folder; one that
    names its own trackers keeps them."""
    wanted = args.report_to
    names = [wanted] if isinstance(wanted, str) else list(wanted or [])
    return names in ([], ["none"]) and tensorboard_available() and "TENSORBOARD_LOGGING_DIR" in os.environ


def restore_mlflow_run(output_dir: Path) -> None:
    """On a resumed launch, the MLflow run the first launch started (unless the user named one)."""
    kept = output_dir / MLFLOW_RUN_ID_FILE
    if kept.exists() and "MLFLOW_RUN_ID" not in os.environ:
        os.environ["MLFLOW_RUN_ID"] = kept.read_text().strip()


def remember_mlflow_run(output_dir: Path) -> None:
    """The active MLflow run's id, when the script uses MLflow, for the next launch of this run."""
    import sys

    mlflow = sys.modules.get("mlflow")
    active = mlflow.active_run() if mlflow is not None else None
    if active is not None:
        (output_dir / MLFLOW_RUN_ID_FILE).write_text(active.info.run_id)


def mlflow_keeper(output_dir: Path) -> Any:
    """A Trainer callback that remembers the MLflow run once training has begun (MLflow's own callback
    starts it then)."""
    from transformers import TrainerCallback

    class KeepMlflowRun(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                remember_mlflow_run(output_dir)

    return KeepMlflowRun()
