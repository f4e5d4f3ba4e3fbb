"""What the user asked `train` for: a value the CLI builds, a dry run prints and the agent receives."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCRIPT_TASK = "script"
DEFAULT_MAX_RESTARTS = 2


@dataclass(frozen=True)
class TrainRequest:
    """Everything the user asked for; a value that a dry run can print."""

    task: str
    glue_task: str = "mrpc"
    dataset: str | None = None
    train_file: Path | None = None
    eval_file: Path | None = None
    model: str | None = None
    demo: bool = False
    run: str | None = None
    resume: bool = False
    resume_from: str | None = None  # --resume-from CLUSTER/RUN: the other cluster whose stored run may be taken
    ppn: int | None = None
    threads: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    trainer_args: tuple[str, ...] = ()
    fetch_model: Path | None = None
    offline: bool = False
    tuned: bool = True
    max_restarts: int = DEFAULT_MAX_RESTARTS
    storage: str | None = None  # --storage: where the run is kept beyond the nodes (else the config's)
    script: Path | None = None    # train PATH.py: a user's script (task "script")
    module: str | None = None     # train -m MODULE
    workdir: Path | None = None   # the folder the script runs in (default: the script's own)
    data: tuple[Path, ...] = ()   # --data: files every node gets, in XC_DATA_DIR
    excludes: tuple[str, ...] = ()  # --exclude: workdir paths left out
    include_secrets: tuple[str, ...] = ()  # --include-secret: secret-looking workdir paths sent anyway

    @property
    def is_script(self) -> bool:
        return self.task == SCRIPT_TASK

    @property
    def label(self) -> str:
        """What runs: the task, or script:NAME / module:NAME; runs of one label resume each other."""
        if not self.is_script:
            return self.task
        return f"module:{self.module}" if self.module else f"script:{Path(str(self.script)).name}"
