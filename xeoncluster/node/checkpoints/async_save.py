"""Checkpoints off the critical path for the built-in tasks' Trainer (`--async-save`).

At a save, the step only copies the checkpoint into memory (checkpoint_snapshot.py) and takes part
in the ranks' RNG all_gather (a collective: it stays in the step); a background thread writes the
files (checkpoint_writer.py). Every other rule of a checkpoint holds as with a synchronous save:

- at most one write is in flight: a save waits for the write before it;
- train() returns (a stop, a notice, the end of training, an error) only once the write is done;
- the "checkpoint" event and rotation come once the checkpoint is complete: callbacks with an
  `on_checkpoint_written(args, state, step)` method hear of it at the next step boundary, or when
  train() returns, in the training thread;
- each node's saving rank writes the weights and every rank's RNG state, as NodeLocalWeights and
  SharedRngStates do for a synchronous save (make_trainer leaves those out here).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from xeoncluster.node.checkpoints import checkpoint_snapshot as snap
from xeoncluster.node.checkpoints.checkpoint_writer import CheckpointWriter
from xeoncluster.node.checkpoints.node_checkpoint import gather_rng_states, shares_rng_states
from xeoncluster.node.checkpoints.resume_point import rotate

# From benchmarks/bench_checkpoint.py (docs/benchmarks.md).
DEFAULT_ASYNC_SAVE = False


def unsupported_reason(args: Any, stack: str) -> str | None:
    """Why a run cannot save in the background, if it cannot: what the writer does not reproduce."""
    if stack != "stock":
        return f"the {stack} stack's transformers"
    for name in ("push_to_hub", "metric_for_best_model", "deepspeed", "fsdp"):
        if getattr(args, name, None):
            return f"--{name}"
    return None


def async_save_trainer_class(base: type) -> type:
    return type("AsyncSaveTrainer", (AsyncSaveMixin, base), {})


# A mixin on the Trainer: type checkers see the Trainer's attributes through Any.
_TrainerBase: Any = Any if TYPE_CHECKING else object


class AsyncSaveMixin(_TrainerBase):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checkpoint_writer = CheckpointWriter(
            after=lambda snapshot: rotate(snapshot.directory.parent, self.args.save_total_limit))

    def train(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().train(*args, **kwargs)
        finally:
            self.checkpoint_writer.wait()
            self._announce_written()

    def _maybe_log_save_evaluate(self, *args: Any, **kwargs: Any) -> None:
        self._announce_written()
        super()._maybe_log_save_evaluate(*args, **kwargs)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        self.checkpoint_writer.wait()
        self._announce_written()
        if self.hp_search_backend is None and trial is None:
            self.store_flos()  # a collective under DDP
        folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        directory = Path(self._get_output_dir(trial=trial)) / folder
        rng = {} if self.args.save_only_model else self._rng_files(directory)
        if self.args.should_save:
            self.checkpoint_writer.start(self._snapshot(directory, rng))

    def _rng_files(self, directory: Path) -> dict[str, bytes]:
        own = snap.rng_state_bytes()
        if shares_rng_states(self.args):
            gathered = gather_rng_states(self.args, own)
            return {f"rng_state_{rank}.pth": data for rank, data in gathered.items() if data is not None}
        name = "rng_state.pth" if self.args.world_size <= 1 else f"rng_state_{self.args.process_index}.pth"
        if not self.args.should_save:  # its own RNG state is all a rank that saves nothing else writes
            directory.mkdir(parents=True, exist_ok=True)
            (directory / name).write_bytes(own)
        return {name: own}

    def _snapshot(self, directory: Path, rng: dict[str, bytes]) -> snap.CheckpointSnapshot:
        from transformers.trainer import TRAINING_ARGS_NAME

        snap.stamp_config(self.model)
        full = not self.args.save_only_model
        scaler = getattr(self.accelerator, "scaler", None) if full else None
        return snap.CheckpointSnapshot(
            directory=directory,
            step=self.state.global_step,
            weights=snap.weights_copy(self.model),
            model=self.model,
            processing_class=self.processing_class,
            files={**rng, TRAINING_ARGS_NAME: snap.serialized(self.args)},
            optimizer=snap.deep_copy(self.optimizer.state_dict()) if full else None,
            scheduler=snap.deep_copy(self.lr_scheduler.state_dict()) if full else None,
            scaler=snap.deep_copy(scaler.state_dict()) if scaler is not None else None,
            trainer_state=snap.trainer_state_json(self),
        )

    def _announce_written(self) -> None:
        for step in self.checkpoint_writer.written():
            for callback in self.callback_handler.callbacks:
                hook = getattr(callback, "on_checkpoint_written", None)
                if hook is not None:
                    hook(self.args, self.state, step)
