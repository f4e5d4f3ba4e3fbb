"""What the user asked `train` for: a value the CLI builds, a dry run prints and the agent receives.

One kind per run: a built-in task (TaskRequest) or a user's script (ScriptRequest), each with the
options that mean something to it, over what every run has (TrainRequest). `kind` tells them apart
in request.json."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# A run name becomes a folder on the laptop and on every node, and a key in storage.
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

SCRIPT_TASK = "script"
DEFAULT_MAX_RESTARTS = 2
DEFAULT_STALL_MINUTES = 10.0


@dataclass(frozen=True, kw_only=True)
class TrainRequest:
    """What every run is asked for, a task's or a script's."""

    run: str | None = None
    resume: bool = False
    resume_from: str | None = None  # --resume-from CLUSTER/RUN: the other cluster whose stored run may be taken
    ppn: int | None = None
    threads: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    trainer_args: tuple[str, ...] = ()
    fetch_model: Path | None = None  # the run's model/ folder, a task's or a script's that writes one
    offline: bool = False
    tuned: bool = True
    max_restarts: int = DEFAULT_MAX_RESTARTS  # the job's own failures (a stall); lost nodes count apart
    max_interruptions: int | None = None  # lost nodes replaced before the run gives up; None: no bound
    max_cost: float | None = None  # USD of node-hours the run may spend before it stops, checkpointed; None: no bound
    storage: str | None = None  # --storage: where the run is kept beyond the nodes (else the config's)
    stall_minutes: float = DEFAULT_STALL_MINUTES  # a step this long overdue (and 10x the median step) is a hang
    min_nodes: int = 1  # a run that lost nodes it cannot replace trains on with at least this many, else waits
    # A worker lost with no replacement ready (no notice, or one shorter than a replacement's boot): the run
    # trains on without it, down to min_nodes, while its replacement boots, and grows back once it is ready;
    # False: every node waits, idle, for the replacement, and the run resumes on as many nodes as before.
    train_while_replacing: bool = True
    batch_world: int | None = None  # set by the agent: the world the global batch was set for (its first launch)

    @property
    def hub_offline(self) -> bool:
        """Whether the ranks must not reach the Hugging Face hub."""
        return self.offline


@dataclass(frozen=True, kw_only=True)
class TaskRequest(TrainRequest):
    """A built-in task (squad, glue): its model and data are options."""

    kind: Literal["task"] = "task"
    task: str
    glue_task: str = "mrpc"
    dataset: str | None = None
    train_file: Path | None = None
    eval_file: Path | None = None
    model: str | None = None
    demo: bool = False

    @property
    def hub_offline(self) -> bool:
        return self.offline or self.demo  # the demo's model and data are built on the nodes

    @property
    def label(self) -> str:
        """What runs; runs of one label resume each other."""
        return self.task


@dataclass(frozen=True, kw_only=True)
class ScriptRequest(TrainRequest):
    """A user's script (train PATH.py) or module (train -m MODULE), with the folder it runs in."""

    kind: Literal["script"] = "script"
    script: Path | None = None
    module: str | None = None
    workdir: Path | None = None   # the folder the script runs in (default: the script's own)
    data: tuple[Path, ...] = ()   # --data: files every node gets, in XC_DATA_DIR
    excludes: tuple[str, ...] = ()  # --exclude: workdir paths left out
    include_secrets: tuple[str, ...] = ()  # --include-secret: secret-looking workdir paths sent anyway

    @property
    def label(self) -> str:
        """script:NAME or module:NAME; runs of one label resume each other."""
        return f"module:{self.module}" if self.module else f"script:{Path(str(self.script)).name}"


AnyRequest = TaskRequest | ScriptRequest
