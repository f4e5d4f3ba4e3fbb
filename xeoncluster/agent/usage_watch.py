"""While a job runs, sample every node's CPU, memory and network use every few seconds, keep the
samples in the run's usage.jsonl, and hand the newest to the supervisor (it goes into run.json, where
`runs` and `status` read it). Each tick also lets the supervisor look for a stall.

A node whose CPU use is far below the others' is marked `low`: a straggler, a node swapping, or a
rank stuck while the rest wait for it look alike from the step counter, but not from here.
"""
from __future__ import annotations

import importlib.util
import json
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from xeoncluster.agent.background import BackgroundWatch
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.untrusted import MOST, Timestamp
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import remote_command
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.record import NodeUse, RunFiles
from xeoncluster.wire.layout import NODE_LIB, RemoteLayout

SAMPLE_SECONDS = 5.0
LOW_FRACTION = 0.5   # below this share of the median CPU use of the nodes...
LOW_FLOOR = 20.0     # ...while that median is at least this busy (percent)
USAGE_MODULE = "xeoncluster.node.usage"


class Sample(BaseModel):
    """What xeoncluster/node/usage.py prints on a node."""

    time: Timestamp
    cpu_seconds: float = Field(ge=0, allow_inf_nan=False)
    cpus: int = Field(ge=1)
    rss: int = Field(ge=0)
    mem_total: int = Field(ge=0)
    rx: int = Field(ge=0)
    tx: int = Field(ge=0)


def rates(before: Sample, now: Sample) -> NodeUse:
    span = max(now.time - before.time, 1e-3)
    cpu = 100 * max(0.0, now.cpu_seconds - before.cpu_seconds) / (span * now.cpus)
    # min(): a node's counters are its own to report; the run record takes no rate beyond MOST
    return NodeUse(cpu_percent=round(min(cpu, 100.0), 1),
                   mem_percent=round(min(100 * now.rss / now.mem_total, MOST), 1) if now.mem_total else 0.0,
                   rx_bytes_per_s=round(min(max(0, now.rx - before.rx) / span, MOST)), at=now.time,
                   tx_bytes_per_s=round(min(max(0, now.tx - before.tx) / span, MOST)))


def mark_low(uses: dict[str, NodeUse]) -> dict[str, NodeUse]:
    if len(uses) < 2:
        return uses
    median = statistics.median(u.cpu_percent for u in uses.values())
    low = median >= LOW_FLOOR
    return {name: u.model_copy(update={"low": low and u.cpu_percent < LOW_FRACTION * median})
            for name, u in uses.items()}


@dataclass
class UsageWatch(BackgroundWatch):
    ctx: CommandContext
    nodes: list[Node]
    home: str
    files: RunFiles
    on_usage: Callable[[dict[str, NodeUse]], None]
    on_tick: Callable[[], None]
    interval: float = SAMPLE_SECONDS
    scalars: UsageScalars = field(default_factory=lambda: UsageScalars(None))
    _last: dict[str, Sample] = field(default_factory=dict)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _shell: NodeShell | None = None

    def __enter__(self) -> UsageWatch:
        self._shell = self.ctx.shell()
        self._start("xc-usage-watch")
        return self

    def _interrupt(self) -> None:
        # A sample's SSH command to a node lost with no notice would hold the job's end (and the run's
        # recovery) for the whole join: closing its connections ends it at once.
        if self._shell is not None:
            self._shell.close()

    def _ended(self) -> None:
        self.scalars.close()

    def _watch(self) -> None:
        assert self._shell is not None
        try:
            while not self._done.wait(self.interval):
                self._sample(self._shell)
                if not self._done.is_set():
                    self.on_tick()
        finally:
            self._shell.close()

    def _sample(self, shell: NodeShell) -> None:
        layout = RemoteLayout(self.home)
        command = remote_command("env", f"PYTHONPATH={layout.path(NODE_LIB)}", layout.python, "-m", USAGE_MODULE)
        try:
            results = shell.run(self.nodes, command)
        except (XeonClusterError, OSError):
            return  # a node that does not answer is the node watch's business, not this one's
        uses = {}
        for name, result in results.items():
            sample = _parse(result.stdout) if result.ok else None
            if sample is None:
                continue
            if name in self._last:
                uses[name] = rates(self._last[name], sample)
            self._last[name] = sample
        if uses:
            uses = mark_low(uses)
            with open(self.files.usage, "a") as out:
                for name, use in uses.items():
                    out.write(json.dumps({"node": name, **use.model_dump()}) + "\n")
            self.scalars.write(uses)
            self.on_usage(uses)


class UsageScalars:
    """The samples as TensorBoard scalars (nodes/NODE/cpu_percent, ...) in the agent's run folder, when
    a writer (tensorboardX, part of the node stack) is installed where the agent runs."""

    def __init__(self, folder: Path | None) -> None:
        self.writer: Any = None
        if folder is not None and importlib.util.find_spec("tensorboardX") is not None:
            from tensorboardX import SummaryWriter

            self.writer = SummaryWriter(str(folder))

    def write(self, uses: dict[str, NodeUse]) -> None:
        if self.writer is None:
            return
        for name, use in uses.items():
            for key in ("cpu_percent", "mem_percent", "rx_bytes_per_s", "tx_bytes_per_s"):
                self.writer.add_scalar(f"nodes/{name}/{key}", getattr(use, key), walltime=use.at)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _parse(stdout: str) -> Sample | None:
    try:
        return Sample.model_validate_json(stdout.strip().splitlines()[-1])
    except (ValidationError, IndexError):
        return None
