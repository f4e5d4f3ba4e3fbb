"""The HF Trainer of a user's script, given the contract `python -m xeoncluster.node` has, without a change to
the script: a notice or a stop saves a checkpoint at the next step and stops (on every rank at once),
each node keeps a whole copy of every checkpoint, rank 0 reports steps and checkpoints as events,
and a resumed run hands the newest checkpoint to `Trainer.train` unless the script names one.

The Trainer is patched when the script imports it (an import hook on `transformers.trainer`), so a
script that never uses it never imports transformers for it.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from xeoncluster.node.checkpoints.interruption import NoticeWatcher, StepMarker, StopOnNotice, WatchSettings
from xeoncluster.node.events.events import StoppedEvent, emit
from xeoncluster.node.events.trackers import add_tensorboard, adds_tensorboard, mlflow_keeper
from xeoncluster.node.startup import distributed

TRAINER_MODULE = "transformers.trainer"


class TrainerHook:
    def __init__(self, info: distributed.DistInfo, output_dir: Path, resume: bool, settings: WatchSettings) -> None:
        self.info, self.output_dir, self.resume, self.settings = info, output_dir, resume, settings
        self.stops: list[StopOnNotice] = []
        self.trainer: Any = None
        self.resumed_step: int | None = None

    @property
    def stopped(self) -> StopOnNotice | None:
        return next((s for s in self.stops if s.stopped_at is not None), None)

    def install(self) -> None:
        if TRAINER_MODULE in sys.modules:
            self.patch(sys.modules[TRAINER_MODULE])
        else:
            sys.meta_path.insert(0, _PatchOnImport(self))

    def patch(self, module: ModuleType) -> None:
        trainer_class = module.Trainer
        original_init, original_train = trainer_class.__init__, trainer_class.train
        hook = self

        def __init__(trainer: Any, *args: Any, **kwargs: Any) -> None:
            original_init(trainer, *args, **kwargs)
            hook.attach(trainer)

        def train(trainer: Any, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
            if resume_from_checkpoint is None and hook.resume:
                resume_from_checkpoint = hook.newest(trainer)
            result = original_train(trainer, resume_from_checkpoint, *args, **kwargs)
            hook.trainer = trainer
            stopped = hook.stopped
            if stopped is not None:
                raise Stopped(stopped.stopped_at, stopped.reason or "")
            return result

        trainer_class.__init__, trainer_class.train = __init__, train

    def attach(self, trainer: Any) -> None:
        from xeoncluster.node.checkpoints.node_checkpoint import NodeLocalWeights, SharedRngStates
        from xeoncluster.node.events.event_reporter import EventReporter

        if Path(trainer.args.output_dir).resolve() != self.output_dir.resolve() and self.info.is_main:
            print(f"training: warning: the Trainer writes to {trainer.args.output_dir}, not $XC_OUTPUT_DIR "
                  f"({self.output_dir}): its checkpoints are neither kept in storage nor restored after a lost "
                  "node; pass --output_dir {output}", file=sys.stderr, flush=True)
        # Any node's copy must restore any node: a replacement starts from a survivor's checkpoint.
        trainer.args.save_on_each_node = True
        node = distributed.own_address()
        stop = StopOnNotice(NoticeWatcher(self.settings, self.info.rank, node).start())
        self.stops.append(stop)
        if adds_tensorboard(trainer.args):
            add_tensorboard(trainer)
        for callback in (stop, NodeLocalWeights(), SharedRngStates(), EventReporter(node),
                         mlflow_keeper(self.output_dir)):
            trainer.add_callback(callback)
        if self.info.is_main:
            trainer.add_callback(StepMarker(self.output_dir / "progress.json"))

    def newest(self, trainer: Any) -> str | None:
        from xeoncluster.node.checkpoints.resume_point import agreed_checkpoint, checkpoint_step

        checkpoint = agreed_checkpoint(Path(trainer.args.output_dir))
        if checkpoint is None:
            return None
        self.resumed_step = checkpoint_step(checkpoint)
        if self.info.is_main:
            print(f"training: resuming from {checkpoint}", flush=True)
        return str(checkpoint)

    def stop_watchers(self) -> None:
        for stop in self.stops:
            stop.watcher.stop()


class Stopped(BaseException):
    """The Trainer stopped at a step boundary with its checkpoint saved: the script must not go on to
    evaluate or save as if training had finished (a BaseException: `except Exception` lets it pass)."""

    def __init__(self, step: int | None, reason: str) -> None:
        super().__init__(f"stopped at step {step} ({reason})")
        self.step, self.reason = step, reason


def report_stopped(info: distributed.DistInfo, step: int | None, reason: str) -> None:
    if info.is_main:
        emit(StoppedEvent(node=distributed.own_address(), step=step, reason=reason))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def __init__(self, hook: TrainerHook) -> None:
        self.hook = hook

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TRAINER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, hook = spec.loader, self.hook

        class Patching(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                hook.patch(module)

        spec.loader = Patching()
        return spec
