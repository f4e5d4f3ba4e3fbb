"""Stop cleanly when asked: checkpoint at the end of a step, then exit with EXIT_STOPPED.

A watcher thread on every rank polls its node's notice sources (xeoncluster/node/checkpoints/notices.py). What a
provider's notice does depends on who supervises the run (`XC_NOTICE_POLICY`):

- `report` (the run agent supervises): the rank reports the notice as an event and trains on. The
  agent starts a replacement at once and, when it is ready, asks the ranks to stop through the stop
  file, so the new node's boot is not on the critical path. The ranks also stop by themselves when
  the node's announced deadline comes close.
- `stop` (the default, e.g. under torchrun): stop after the current step.

Every rank checks after each step and the ranks agree with one all-reduce, so they all stop at the
same step: a rank stopping alone would leave the others blocked in their all-reduce.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from transformers import TrainerCallback

from xeoncluster.node.checkpoints.notices import Notice, NoticeSource, sources_from_env
from xeoncluster.node.events.events import NoticeEvent, emit
from xeoncluster.node.rank_env import XC_NOTICE_INTERVAL, XC_NOTICE_MARGIN, XC_NOTICE_POLICY

Policy = Literal["report", "stop"]
# Seconds before a node's announced end by which the ranks stop, at the least: time for the step in
# flight and the checkpoint. Slower steps or saves widen it (three steps and two saves' worth); every
# second of it is a second the run stands still when a notice is shorter than a replacement's boot.
DEFAULT_MARGIN = 10.0


@dataclass(frozen=True)
class WatchSettings:
    sources: tuple[NoticeSource, ...]
    policy: Policy = "stop"
    interval: float = 2.0
    margin: float = DEFAULT_MARGIN

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WatchSettings:
        policy: Policy = "report" if env.get(XC_NOTICE_POLICY) == "report" else "stop"
        return cls(tuple(sources_from_env(env)), policy, float(env.get(XC_NOTICE_INTERVAL, "2")),
                   float(env.get(XC_NOTICE_MARGIN, str(DEFAULT_MARGIN))))


class NoticeWatcher:
    """Polls the sources in a thread; reports each new kind of notice once, as an event."""

    def __init__(self, settings: WatchSettings, rank: int, node: str) -> None:
        self.settings = settings
        self.rank, self.node = rank, node
        self.stop_reason: str | None = None
        self.deadline: tuple[float, str] | None = None
        self._reported: set[str] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="xc-notice-watch", daemon=True)

    def start(self) -> NoticeWatcher:
        if self.settings.sources:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()

    def should_stop(self, now: float, step_seconds: float, save_seconds: float = 0.0) -> str | None:
        if self.stop_reason is not None:
            return self.stop_reason
        reserve = max(self.settings.margin, 3 * step_seconds + 2 * save_seconds)
        if self.deadline is not None and now > self.deadline[0] - reserve:
            return f"{self.deadline[1]}: its deadline is close"
        return None

    def _poll(self) -> None:
        while self.stop_reason is None and not self._done.wait(self.settings.interval):
            for source in self.settings.sources:
                notice = source.poll()
                if notice is not None:
                    self._take(notice)

    def _take(self, notice: Notice) -> None:
        if notice.kind == "stop" or (notice.kind == "interruption" and self.settings.policy == "stop"):
            self.stop_reason = notice.reason
        if notice.kind != "stop" and notice.kind not in self._reported:
            self._reported.add(notice.kind)
            if notice.deadline is not None:
                self.deadline = (notice.deadline, notice.reason)
            emit(NoticeEvent(rank=self.rank, node=self.node, reason=notice.reason, deadline=notice.deadline))


class StopOnNotice(TrainerCallback):
    """After each step: if any rank must stop, every rank saves a checkpoint of this step and stops."""

    def __init__(self, watcher: NoticeWatcher) -> None:
        self.watcher = watcher
        self.stopped_at: int | None = None
        self.reason: str | None = None
        self._last_end: float | None = None
        self._step_seconds = 0.0
        self._save_seconds = 0.0

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        now = time.time()
        if self._last_end is not None:
            self._step_seconds = now - self._last_end
        self._last_end = now
        reason = self.watcher.should_stop(now, self._step_seconds, self._save_seconds)
        if self.stopped_at is None and _any_rank(reason is not None):
            self.stopped_at = state.global_step
            self.reason = reason or "asked to stop by another rank"
            control.should_save = True
            control.should_training_stop = True
        return control


    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self._last_end is not None:  # the Trainer saves right after the step's end
            self._save_seconds = max(self._save_seconds, time.time() - self._last_end)
        return control


def _any_rank(flag: bool) -> bool:
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    tensor = torch.tensor([1 if flag else 0], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


class StepMarker(TrainerCallback):
    """Rank 0 records the last finished step, so the steps a lost node cost can be counted."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": state.global_step}))
        tmp.replace(self.path)
        return control
