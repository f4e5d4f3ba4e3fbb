"""The typed options objects `train` and `export` turn their click options into on their first line, so
that nothing below a click command takes loose options."""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import click

from xeoncluster.cli.group import pass_through

Options = TypeVar("Options", bound="JobOptions")


@dataclass(frozen=True)
class JobOptions:
    """What `train` and `export` both take: the job itself."""

    task: str | None
    module: str | None
    workdir: Path | None
    excludes: tuple[str, ...]
    include_secrets: tuple[str, ...]
    glue_task: str
    demo: bool
    dataset: str | None
    train_file: Path | None
    eval_file: Path | None
    model: str | None
    run: str | None
    ppn: int | None
    threads: int | None
    env_pairs: tuple[str, ...]
    offline: bool
    tune: bool
    max_restarts: int
    trainer_args: tuple[str, ...]  # the arguments after `--`

    @classmethod
    def of(cls: type[Options], ctx: click.Context, given: dict[str, Any]) -> tuple[Options, dict[str, Any]]:
        """These options from what click passed, and the rest (the cluster's own options)."""
        names = {f.name for f in fields(cls)}
        taken = {k: v for k, v in given.items() if k in names}
        # export takes paths inside the pod as text; both are paths from here on
        for key in ("train_file", "eval_file"):
            taken[key] = Path(taken[key]) if taken.get(key) else None
        options = cls(**taken, trainer_args=pass_through(ctx))
        return options, {k: v for k, v in given.items() if k not in names}


@dataclass(frozen=True)
class TrainOptions(JobOptions):
    data_files: tuple[Path, ...]
    resume: bool
    resume_from: str | None
    fetch_model: Path | None
    storage: str | None
    detach: bool
    sweeps: tuple[str, ...]
    stall_minutes: float
    max_interruptions: int | None
    min_nodes: int
    train_while_replacing: bool
    max_cost: float | None
    dry_run: bool
    nodes: int | None
    instance_type: str | None


@dataclass(frozen=True)
class ExportOptions(JobOptions):
    kind: str
    nodes: int | None
    instance_type: str | None
    image: str | None
    dockerfile: Path | None
    pvc: str
    market: str | None
    stack_name: str | None
    config_path: Path | None
