"""While a job runs, ask the provider every few seconds whether each node is still there.

A node that vanishes without a notice (a hard crash, an instance terminated outright) leaves the
other ranks blocked in an all-reduce until TCP gives up on it, minutes later (about 130 s on the
EC2 stand-in). The watch sees the node gone from the provider's list and stops the job at once, so
recovery starts within one poll instead.

Stopping a healthy job is worse than stopping a dead one late, so the watch needs two independent
signals: the provider no longer lists the node, and the node no longer answers over SSH. A provider
that errors or times out says nothing (SkyPilot's users lost healthy jobs to recoveries started by
status-check timeouts); a node the provider forgot but that still answers is asked again next poll.

Asking the provider costs an API call, so it is asked about every node only every few seconds. In
between, every node's SSH port is knocked on each second, which costs nothing: a node that no longer
takes a connection is asked about at once, and is gone when the provider no longer lists it either.
The same two signals, in the other order: a loss is noticed within about two seconds, not five to
ten (issue 38).
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from xeoncluster.agent.background import BackgroundWatch
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.operations.repair import answers
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import word
from xeoncluster.remote.shell import port_open

POLL_SECONDS = 5.0   # the provider, about every node
PROBE_SECONDS = 1.0  # every node's SSH port
# A listening port takes a connection within a round trip however busy the node's CPUs are (the
# kernel answers): a second of silence is no answer, never a slow one.
PROBE_TIMEOUT = 1.0
STOP_GRACE_SECONDS = 10.0  # a stop the ranks can act on: they may be in a checkpoint


@dataclass
class ProviderSilence:
    """When the provider stopped answering, so the run's log says so once, and once when it is back."""
    report: Callable[[str], None]
    since: float | None = None

    def failed(self, exc: Exception) -> None:
        if self.since is None:
            self.since = time.monotonic()
            why = exc.one_line() if isinstance(exc, XeonClusterError) else str(exc)
            self.report(f"the provider does not answer ({why}); no node counts as lost on that alone")

    def answered(self) -> None:
        if self.since is not None:
            self.report(f"the provider answers again after {time.monotonic() - self.since:.0f}s")
            self.since = None


@dataclass
class NodeWatch(BackgroundWatch):
    ctx: CommandContext
    nodes: list[Node]
    on_gone: Callable[[list[str]], None]
    report: Callable[[str], None] = lambda _line: None
    interval: float = POLL_SECONDS
    probe_interval: float = PROBE_SECONDS
    probe: Callable[[Node], bool] | None = None  # does the node take a connection; default: its SSH port
    gone: list[str] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> NodeWatch:
        if self.nodes:
            self._start("xeoncluster-node-watch")
        return self

    def _watch(self) -> None:
        silence = ProviderSilence(self.report)
        polls_every = max(1, round(self.interval / self.probe_interval))
        for tick in itertools.count(1):
            if self._done.wait(self.probe_interval):
                return
            if tick % polls_every == 0:
                gone = self._silent(self._unlisted(silence, self.nodes))
            else:
                gone = [node.name for node in self._unlisted(silence, self._unreachable(self.nodes))]
            if gone and not self._done.is_set():
                self.gone = gone
                self.on_gone(gone)
                return

    def _unreachable(self, nodes: list[Node]) -> list[Node]:
        if not nodes:
            return []
        probe = self.probe or self._port_open
        with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
            answered = list(pool.map(probe, nodes))
        return [node for node, ok in zip(nodes, answered, strict=True) if not ok]

    def _port_open(self, node: Node) -> bool:
        return port_open(node.ssh_host, self.ctx.identity().port, PROBE_TIMEOUT)

    def _unlisted(self, silence: ProviderSilence, nodes: list[Node]) -> list[Node]:
        if not nodes:
            return []
        try:
            listed = {node.name for node in self.ctx.provider.nodes(self.ctx.config, priced=False)}
        except (XeonClusterError, OSError) as exc:
            silence.failed(exc)
            return []
        silence.answered()
        return [node for node in nodes if node.name not in listed]

    def _silent(self, unlisted: list[Node]) -> list[str]:
        """Of the nodes the provider no longer lists, those that do not answer over SSH either. A port that
        takes no connection is silence already, as between polls: SSH to a machine whose network is gone
        waits for its connect to fail, and a poll that came first held the job's stop that long (4.4 s on
        the stand-in, issue 38)."""
        closed = self._unreachable(unlisted)
        silent = [node.name for node in closed]
        if len(closed) < len(unlisted):
            shell = self.ctx.shell()
            try:
                silent += [node.name for node in unlisted if node not in closed and not answers(shell, node)[0]]
            finally:
                shell.close()
        quiet = set(silent)
        for node in unlisted:
            if node.name not in quiet:
                self.report(f"the provider no longer lists {node.name}, but it answers; it is asked again")
        return silent


def stop_command(pid_file: str, grace: float = STOP_GRACE_SECONDS) -> str:
    """SIGINT to the job's mpiexec, which stops every rank; KILL if it lingers `grace` seconds."""
    tries = max(1, round(grace / 0.2))
    return (f"pid=$(cat {word(pid_file)} 2>/dev/null) || exit 0; kill -INT $pid 2>/dev/null || exit 0; "
            f"for i in $(seq {tries}); do kill -0 $pid 2>/dev/null || exit 0; sleep 0.2; done; kill -KILL $pid")
