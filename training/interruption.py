"""Stop cleanly on a spot interruption notice: checkpoint at the end of the current step, then exit.

A watcher thread polls the instance metadata service (IMDSv2 `spot/instance-action`, which EC2 fills
about two minutes before it reclaims a spot instance) and, for any provider, a stop-request file.
Every rank checks the flags after each step and the ranks agree with one all-reduce, so they all
stop at the same step: a rank stopping alone would leave the others blocked in their all-reduce.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

# The exit code of a run stopped on a notice: the checkpoint is saved, the CLI replaces the node.
EXIT_INTERRUPTED = 75
IMDS = "http://169.254.169.254/latest"


@dataclass(frozen=True)
class WatchSettings:
    imds: bool  # poll IMDS (set by the CLI on providers that send notices)
    stop_file: Path | None
    interval: float = 2.0

    @classmethod
    def from_env(cls, env: dict[str, str]) -> WatchSettings:
        stop = env.get("XC_STOP_FILE")
        return cls(env.get("XC_SPOT_WATCH") == "1", Path(stop) if stop else None,
                   float(env.get("XC_SPOT_WATCH_INTERVAL", "2")))


def imds_notice(timeout: float = 1.0) -> str | None:
    """The spot instance-action document, or None while there is no notice (or no IMDS)."""
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        token_request = urllib.request.Request(f"{IMDS}/api/token", method="PUT",  # noqa: S310 - IMDS is a fixed http:// URL
                                               headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        token = no_proxy.open(token_request, timeout=timeout).read().decode()
        action = urllib.request.Request(f"{IMDS}/meta-data/spot/instance-action",  # noqa: S310 - IMDS is a fixed http:// URL
                                        headers={"X-aws-ec2-metadata-token": token})
        return no_proxy.open(action, timeout=timeout).read().decode()
    except OSError:
        return None  # 404 until a notice arrives; unreachable where there is no IMDS


class NoticeWatcher:
    def __init__(self, settings: WatchSettings) -> None:
        self.settings = settings
        self.reason: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="xc-spot-watch", daemon=True)

    def start(self) -> NoticeWatcher:
        if self.settings.imds or self.settings.stop_file:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()

    def _poll(self) -> None:
        while self.reason is None and not self._done.wait(self.settings.interval):
            self.reason = self._check()

    def _check(self) -> str | None:
        if self.settings.stop_file is not None and self.settings.stop_file.exists():
            return "stop requested"
        if self.settings.imds:
            notice = imds_notice()
            if notice:
                return f"spot interruption notice ({notice.strip()})"
        return None


class StopOnNotice(TrainerCallback):
    """After each step: if any rank's watcher saw a notice, save a checkpoint and stop training."""

    def __init__(self, watcher: NoticeWatcher) -> None:
        self.watcher = watcher
        self.stopped_at: int | None = None
        self.reason: str | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.stopped_at is None and _any_rank(self.watcher.reason is not None):
            self.stopped_at = state.global_step
            self.reason = self.watcher.reason or "a notice on another node"
            control.should_save = True
            control.should_training_stop = True
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
    """Rank 0 records the last finished step, so the CLI can count the steps a lost node cost."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": state.global_step}))
        tmp.replace(self.path)
        return control


def own_address() -> str:
    """This node's address towards the master: the CLI knows nodes by their private address."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((master, 9))  # UDP: no packet is sent, the kernel only picks the route
            return str(probe.getsockname()[0])
        except OSError:
            return socket.gethostname()
