"""Writes checkpoint snapshots in a background thread, one at a time, in the HF Trainer's layout (so
--resume, the agent's restore and the storage upload read them as they read the Trainer's own).

The two files that make a checkpoint complete (checkpoints.MARKERS) come last: the weights, then the
trainer state, each written under a staging name and renamed. A write cut short (a kill, a full disk)
leaves a folder that no reader takes for a checkpoint.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path

from xeoncluster.node.checkpoints.checkpoint_snapshot import CheckpointSnapshot
from xeoncluster.node.checkpoints.resume_point import MARKERS
from xeoncluster.node.startup.errors import TrainingError

WEIGHTS, STATE = MARKERS
# transformers.trainer's file names
OPTIMIZER, SCHEDULER, SCALER = "optimizer.pt", "scheduler.pt", "scaler.pt"


def clear_markers(directory: Path) -> None:
    """A folder written again (a step reached again after a resume) is incomplete until rewritten."""
    for name in MARKERS:
        (directory / name).unlink(missing_ok=True)


def write_checkpoint(snapshot: CheckpointSnapshot) -> None:
    import safetensors.torch
    import torch

    directory = snapshot.directory
    directory.mkdir(parents=True, exist_ok=True)
    clear_markers(directory)
    for name, data in snapshot.files.items():
        _staged_bytes(directory / name, data)
    for name, state in ((OPTIMIZER, snapshot.optimizer), (SCHEDULER, snapshot.scheduler),
                        (SCALER, snapshot.scaler)):
        if state is not None:
            torch.save(state, directory / name)
    snapshot.model.config.save_pretrained(directory)
    if snapshot.model.can_generate():
        snapshot.model.generation_config.save_pretrained(directory)
    if snapshot.processing_class is not None:
        snapshot.processing_class.save_pretrained(str(directory))
    _staged(directory / WEIGHTS,
            lambda path: safetensors.torch.save_file(snapshot.weights, str(path), metadata={"format": "pt"}))
    _staged_bytes(directory / STATE, snapshot.trainer_state.encode("utf-8"))


def _staged_bytes(target: Path, data: bytes) -> None:
    _staged(target, lambda path: path.write_bytes(data))


def _staged(target: Path, write: Callable[[Path], object]) -> None:
    staging = target.with_name(f".{target.name}.partial")
    write(staging)
    staging.rename(target)


class CheckpointWriter:
    """One write in flight at most: start() first waits for the one before. `after` runs in the writer
    thread once a checkpoint is complete (rotation: never before, so it never removes the newest
    complete checkpoint for one still being written)."""

    def __init__(self, after: Callable[[CheckpointSnapshot], None] = lambda snapshot: None) -> None:
        self.after = after
        self._thread: threading.Thread | None = None
        self._error: tuple[int, BaseException] | None = None
        self._written: queue.SimpleQueue[int] = queue.SimpleQueue()

    @property
    def in_flight(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, snapshot: CheckpointSnapshot) -> None:
        self.wait()
        # Not a daemon, so a plain interpreter exit waits for it. A rank leaves without that wait
        # (process_exit.leave): AsyncSaveMixin.train() is what joins it, on every way out of training.
        self._thread = threading.Thread(target=self._run, args=(snapshot,), name="xc-checkpoint-writer")
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._raise_failure()

    def written(self) -> list[int]:
        """The steps whose checkpoints were completed since the last call, oldest first."""
        steps = []
        while not self._written.empty():
            steps.append(self._written.get())
        self._raise_failure()
        return steps

    def _run(self, snapshot: CheckpointSnapshot) -> None:
        try:
            write_checkpoint(snapshot)
            self.after(snapshot)
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread, which raises it
            self._error = (snapshot.step, exc)
            return
        self._written.put(snapshot.step)

    def _raise_failure(self) -> None:
        if self._error is not None:
            step, exc = self._error
            self._error = None
            raise TrainingError(f"writing checkpoint-{step} failed: {type(exc).__name__}: {exc}",
                                exit_code=1) from exc
