"""Grow a shrunk run back (agent/shrink.py): while it trains on fewer nodes, the agent asks for the
missing ones with backoff; once they are up and ready (the image's, or the playbooks'; the run's code
and data), the ranks stop at the next step with a checkpoint and the run resumes on every node.

The new nodes take the lowest free names, so that a cluster of three is node0..node2 again."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from xeoncluster.agent.shrink import backoff
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.playbook import load_playbooks
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.operations.launch_ceiling import check_ceiling
from xeoncluster.operations.repair import recorded_base, recorded_image, remove_new
from xeoncluster.operations.up_nodes import add_nodes, playbook_runner
from xeoncluster.providers.base import LaunchRequest, Node
from xeoncluster.providers.node_kinds import Role
from xeoncluster.remote.shell import NodeShell


def size_of(record: ClusterRecord) -> int:
    """The cluster's size as `up` made it: a shrink leaves it, so that the run and `up` grow back to it."""
    return int(record.config.get("nodes", len(record.nodes)))


def free_indices(record: ClusterRecord, count: int) -> list[int]:
    taken = {n.index for n in record.node_list()}
    free: list[int] = []
    index = 0
    while len(free) < count:
        if index not in taken:
            free.append(index)
        index += 1
    return free


def launch_missing(ctx: CommandContext, record: ClusterRecord, shell: NodeShell) -> list[Node]:
    """Launch the workers the cluster lacks of its size, near the master, one per free name; ready to
    run (the cluster's image, else its playbooks). New nodes are removed again if any step fails."""
    missing = size_of(record) - len(record.nodes)
    master = record.master
    if missing <= 0 or master is None:
        return []
    check_ceiling(ctx, record, missing)
    new: list[Node] = []
    try:
        for index in free_indices(record, missing):
            new += ctx.provider.launch(LaunchRequest(ctx.config, 1, recorded_image(record), Role.WORKER, index,
                                                     near=master, base=recorded_base(record), replacement=True))
        add_nodes(ctx, record, new, shell, trust_first_use=False)
        if recorded_image(record) is None:
            playbook_runner(ctx, shell).run_all(load_playbooks(), new, ctx.reporter.detail)
        record.replaced = sorted(set(record.replaced) | {node.name for node in new})  # `status` marks them
        ctx.state.save(record)
    except (Exception, KeyboardInterrupt):
        for node in new:
            if record.node(node.name) is None:  # launched, not yet recorded
                record.set_nodes([*record.node_list(), node])
        remove_new(ctx, record, [node.name for node in new])
        raise
    return new


class Regrowth:
    """In a thread: launch the missing nodes (asking again with backoff while there is no capacity), warm
    them, then call `on_ready`. `ready` once they are; `stop()` ends the asking. `at_once`: the first ask
    comes now, not after the first wait (the run shrank only while its lost nodes are replaced). `after`: the
    lost nodes' removals, which end first: a new node takes a lost one's name, and on some providers (local
    nodes) a node's id is its name."""

    def __init__(self, ctx: CommandContext, warm: Callable[[Node], None], on_ready: Callable[[list[Node]], None],
                 first_wait: float | None = None, at_once: bool = False,
                 after: tuple[threading.Thread, ...] = ()) -> None:
        self.ctx, self.warm, self.on_ready, self.after = ctx, warm, on_ready, after
        self._waits = backoff() if first_wait is None else backoff(first_wait)
        self._first_now = at_once
        self.new: list[Node] = []
        self.ready = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xc-regrowth", daemon=True)

    def start(self) -> Regrowth:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self._next_wait()):
            try:
                with contextlib.closing(self.ctx.shell()) as shell:
                    self.new = self._launch(shell)
            except Exception as exc:  # noqa: BLE001 - no capacity yet (or a launch that failed): ask again later
                self.ctx.reporter.warn(f"no node to grow back with yet: {getattr(exc, 'message', exc)}")
                continue
            if self.new and not self._stopped.is_set():
                self.ready = True
                self.on_ready(self.new)
            return

    def _next_wait(self) -> float:
        if self._first_now:
            self._first_now = False
            return 0.0
        return self._waits()

    def _launch(self, shell: NodeShell) -> list[Node]:
        for removal in self.after:
            removal.join()
        record = self.ctx.state.load()
        if record is None or not record.ready:
            return []
        with self.ctx.reporter.step(f"grow cluster {record.name} back to {size_of(record)} node(s)"):
            new = launch_missing(self.ctx, record, shell)
            for node in new:
                self.warm(node)
        return new
