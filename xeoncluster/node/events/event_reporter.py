"""Rank 0 reports the run's progress as events: started, steps, evaluations and saved checkpoints.

Step events come on every logging step and otherwise at most once a second, plus the first step of
each invocation (a resumed run's first step ends the recovery pause that benchmarks measure).
"""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback

from xeoncluster.node.diagnostics.startup_clock import StartupClock
from xeoncluster.node.events.events import (
    PARAMETERS,
    CheckpointEvent,
    EvalEvent,
    ReadyEvent,
    StartedEvent,
    StepEvent,
    emit,
)

MIN_STEP_INTERVAL = 1.0
EVAL_HEARTBEAT_SECONDS = 10.0


def trained_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class EventReporter(TrainerCallback):
    def __init__(self, node: str, clock: StartupClock | None = None) -> None:
        self.node, self.clock = node, clock
        self._last_step_event = 0.0
        self._first = True

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        metrics: dict[str, float | None] = {}
        if self.clock is not None:  # the checkpoint is loaded and DDP wrapped the model: the first step is next
            self.clock.mark("resume")
            metrics = self.clock.parts()
            emit(ReadyEvent(node=self.node, step=state.global_step, total=state.max_steps, metrics=metrics))
        if state.is_world_process_zero:
            if kwargs.get("model") is not None:  # the agent estimates the gradients' traffic from it
                metrics[PARAMETERS] = float(trained_parameters(kwargs["model"]))
            emit(StartedEvent(node=self.node, step=state.global_step, total=state.max_steps, metrics=metrics))
            self._first = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.time()
        if not state.is_world_process_zero:
            return
        due = self._first or control.should_training_stop or now - self._last_step_event >= MIN_STEP_INTERVAL
        if due and not control.should_log:  # a logging step reports itself, with its loss, in on_log
            self._step(state, None)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        if "loss" in logs:
            self._step(state, float(logs["loss"]))
        if "eval_loss" in logs:
            metrics: dict[str, float | None] = {
                k: float(v) for k, v in logs.items() if k.startswith("eval_") and isinstance(v, int | float)}
            emit(EvalEvent(node=self.node, step=state.global_step, total=state.max_steps, metrics=metrics))

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """During an evaluation no step ends: the step, again, now and then, says the run is alive (the
        agent would otherwise take a long evaluation for a hang)."""
        if state.is_world_process_zero and time.time() - self._last_step_event >= EVAL_HEARTBEAT_SECONDS:
            self._step(state, None)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # A checkpoint written in the background is reported once it is complete (on_checkpoint_written):
        # the agent stores it as soon as it hears of it.
        if state.is_world_process_zero and not getattr(args, "async_save", False):
            self._checkpoint(state, state.global_step)

    def on_checkpoint_written(self, args: Any, state: Any, step: int) -> None:
        if state.is_world_process_zero:
            self._checkpoint(state, step)

    def _checkpoint(self, state: Any, step: int) -> None:
        emit(CheckpointEvent(node=self.node, step=step, total=state.max_steps))

    def _step(self, state: Any, loss: float | None) -> None:
        self._first = False
        self._last_step_event = time.time()
        emit(StepEvent(node=self.node, step=state.global_step, total=state.max_steps, loss=loss))
