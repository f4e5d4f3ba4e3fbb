"""Concise progress lines on stdout instead of the Trainer's dict dumps."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback


class ConciseLog(TrainerCallback):
    """One line per logging step on rank 0 instead of the Trainer's dict dumps."""

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if not state.is_world_process_zero or not logs or "loss" not in logs:
            return
        print(
            f"step {state.global_step}/{state.max_steps}  loss {logs['loss']:.4f}  "
            f"lr {logs.get('learning_rate', 0.0):.2e}  epoch {logs.get('epoch', 0.0):.2f}",
            flush=True,
        )
