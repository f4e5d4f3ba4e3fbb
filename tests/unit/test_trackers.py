"""The trackers' side of a run without a cluster: one W&B run per xeoncluster run (the same id for
every launch of it, another for another run or cluster), TensorBoard into the run's folder, added to a
script's Trainer only when it reports nowhere, and MLflow's run id handed back on resume."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from xeoncluster.job.tracker_env import tracker_env
from xeoncluster.node.events.trackers import MLFLOW_RUN_ID_FILE, adds_tensorboard, restore_mlflow_run


def test_every_launch_of_a_run_reports_to_the_same_wandb_run() -> None:
    first, again = tracker_env("/home/u", "c1", "r1"), tracker_env("/home/u", "c1", "r1")
    assert first == again and first["WANDB_RESUME"] == "allow"
    assert first["WANDB_RUN_ID"] != tracker_env("/home/u", "c2", "r1")["WANDB_RUN_ID"]
    assert first["WANDB_RUN_ID"] != tracker_env("/home/u", "c1", "r2")["WANDB_RUN_ID"]
    assert first["TENSORBOARD_LOGGING_DIR"] == "/home/u/xeoncluster/runs/r1/tensorboard"


@pytest.mark.parametrize(("report_to", "added"), [("none", True), ([], True), (None, True), (["none"], True),
                                                  (["wandb"], False), ("tensorboard", False),
                                                  (["mlflow", "tensorboard"], False)])
def test_a_script_s_trainer_gets_tensorboard_only_when_it_reports_nowhere(monkeypatch: pytest.MonkeyPatch,
                                                                          report_to: object, added: bool) -> None:
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", "/tmp/tb")
    assert adds_tensorboard(SimpleNamespace(report_to=report_to)) is added
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR")
    assert not adds_tensorboard(SimpleNamespace(report_to="none")), "outside a run: nothing added"


def test_a_resumed_launch_continues_the_first_launch_s_mlflow_run(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    restore_mlflow_run(tmp_path)
    assert "MLFLOW_RUN_ID" not in os.environ, "a first launch has none"
    (tmp_path / MLFLOW_RUN_ID_FILE).write_text("abc123\n")
    restore_mlflow_run(tmp_path)
    assert os.environ["MLFLOW_RUN_ID"] == "abc123"
    monkeypatch.setenv("MLFLOW_RUN_ID", "the-users")
    restore_mlflow_run(tmp_path)
    assert os.environ["MLFLOW_RUN_ID"] == "the-users", "the user's own wins"
