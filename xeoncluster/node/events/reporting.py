"""What rank 0 writes to metrics.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunFacts:
    """What metrics.json reports about how the run was set up."""

    task: str
    model: str
    precision: str
    stack: str
    ddp_backend: str | None
    world_size: int
    ranks_per_node: int
    threads_per_rank: int
    torch_version: str
    transformers_version: str


def loss_history(log_history: list[dict[str, Any]]) -> list[dict[str, float]]:
    return [{"step": e["step"], "loss": e["loss"]} for e in log_history if "loss" in e and "step" in e]


def eval_loss_history(log_history: list[dict[str, Any]]) -> list[dict[str, float]]:
    return [
        {"step": e["step"], "eval_loss": e["eval_loss"]} for e in log_history if "eval_loss" in e and "step" in e
    ]


def seconds_per_epoch(runtime: float, epoch: float, global_step: int, resumed_step: int) -> float | None:
    """Runtime covers only this invocation; scale by the share of epochs it trained."""
    if global_step <= 0 or epoch <= 0:
        return None
    epochs_this_run = epoch * (global_step - resumed_step) / global_step
    return runtime / epochs_this_run if epochs_this_run > 0 else None


def write_metrics(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
