"""While a job runs, ask the provider every few seconds whether each node is still there.

A node that vanishes without a notice (a hard crash, an instance terminated outright) leaves the
other ranks blocked in an all-reduce until TCP gives up on it, minutes later (about 130 s on the
EC2 stand-in). The watch sees the node gone from the provider's list and stops the job at once, so
recovery starts within one poll instead.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from xeoncluster.agent.background import BackgroundWatch
from xeoncluster.context import CommandContext
from xeoncluster.errors import XeonClusterError
from xeoncluster.remote_command import word

POLL_SECONDS = 5.0


@dataclass
class NodeWatch(BackgroundWatch):
    ctx: CommandContext
    names: list[str]
    on_gone: Callable[[list[str]], None]
    interval: float = POLL_SECONDS
    gone: list[str] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> NodeWatch:
        if self.names:
            self._start("xeoncluster-node-watch")
        return self

    def _watch(self) -> None:
        while not self._done.wait(self.interval):
            gone = self._missing()
            if gone:
                self.gone = gone
                self.on_gone(gone)
                return

    def _missing(self) -> list[str]:
        try:
            alive = {node.name for node in self.ctx.provider.nodes(self.ctx.config, priced=False)}
        except (XeonClusterError, OSError):
            return []  # an unanswered question is not a lost node; the job's own end still counts
        return [name for name in self.names if name not in alive]


def stop_command(pid_file: str) -> str:
    """SIGINT to the job's mpiexec, which stops every rank; KILL if it lingers."""
    return (f"pid=$(cat {word(pid_file)} 2>/dev/null) || exit 0; kill -INT $pid 2>/dev/null || exit 0; "
            "for i in $(seq 50); do kill -0 $pid 2>/dev/null || exit 0; sleep 0.2; done; kill -KILL $pid")
