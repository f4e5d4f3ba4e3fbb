"""Concise progress lines on stdout instead of the Trainer's dict dumps.

Rank 0 prints `step N/M  loss L  lr R  epoch E  S samples/s  eta H:MM:SS` per logging step; the CLI
turns those lines into a live progress bar on a terminal. Evaluations print `eval  step N/M  eval_loss L`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback


@dataclass
class Pace:
    """Samples/s and time left, measured from this invocation's first step (a resumed run starts mid-way)."""

    started: float = 0.0
    first_step: int = 0

    def start(self, step: int, now: float) -> None:
        self.started, self.first_step = now, step

    def samples_per_second(self, step: int, global_batch: int, now: float) -> float:
        elapsed = now - self.started
        return (step - self.first_step) * global_batch / elapsed if elapsed > 0 else 0.0

    def eta_seconds(self, step: int, max_steps: int, now: float) -> float | None:
        done = step - self.first_step
        return (now - self.started) / done * (max_steps - step) if done > 0 else None


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _global_batch(args: Any) -> int:
    return args.per_device_train_batch_size * max(args.world_size, 1) * args.gradient_accumulation_steps


class ConciseLog(TrainerCallback):
    """One line per logging step (and per evaluation) on rank 0 instead of the Trainer's dict dumps."""

    def __init__(self) -> None:
        self.pace = Pace()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.pace.start(state.global_step, time.monotonic())

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        if "eval_loss" in logs:
            print(f"eval  step {state.global_step}/{state.max_steps}  eval_loss {logs['eval_loss']:.4f}", flush=True)
        if "loss" not in logs:
            return
        now = time.monotonic()
        speed = self.pace.samples_per_second(state.global_step, _global_batch(args), now)
        eta = self.pace.eta_seconds(state.global_step, state.max_steps, now)
        print(
            f"step {state.global_step}/{state.max_steps}  loss {logs['loss']:.4f}  "
            f"lr {logs.get('learning_rate', 0.0):.2e}  epoch {logs.get('epoch', 0.0):.2f}  "
            f"{speed:.1f} samples/s  eta {clock(eta)}",
            flush=True,
        )
