"""One recovery: what the run lost, and how it goes on.

A node that announced its end and whose replacement is ready is swapped for it; any other lost node
is replaced under its own name (repair). Then every node gets the newest checkpoint any of them
holds. A failure with every node alive (a bug, bad data) is not a loss: there is nothing to recover.
A lost worker that cannot be replaced (no capacity) leaves the run on the nodes it has, down to the
run's --min-nodes; below that it waits for capacity (agent/shrink.py). With --train-while-replacing (the
default) a lost worker with no replacement ready is not waited for at all: the run trains on without it
while the agent launches its replacement, and grows back once that is ready (agent/regrowth.py), so the
survivors do not stand idle, billing, through a boot.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from xeoncluster.agent.attempt import Outcome
from xeoncluster.agent.proactive import Readying, swap_in
from xeoncluster.agent.recovery import last_step, lost_nodes, replace_lost, restore_checkpoint
from xeoncluster.agent.regrowth import launch_missing
from xeoncluster.agent.shrink import ShrinkRule, can_shrink, rejoin, shrink, wait_for_floor
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import TrainingError
from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.node.events.events import NoticeEvent, StoppedEvent
from xeoncluster.providers.abilities import remove_node
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.record import Restart, RestartKind
from xeoncluster.wire.layout import RemoteLayout


class Recovery:
    def __init__(self, ctx: CommandContext, shell: NodeShell, plan: LaunchPlan, reported_step: int,
                 noticed: dict[str, NoticeEvent], replacements: dict[str, Readying], rule: ShrinkRule | None = None,
                 cancelled: Callable[[float], bool] = lambda _seconds: False) -> None:
        self.ctx, self.shell, self.plan = ctx, shell, plan
        self.reported_step = reported_step
        self.noticed, self.replacements = noticed, replacements
        rule = rule or ShrinkRule()
        self.min_nodes, self.cancelled = rule.min_nodes, cancelled
        self.train_on = rule.while_replacing  # a lost worker is replaced while the run trains on
        self.run_dir = RemoteLayout(plan.home).run_dir(plan.run)
        self.verdict = ""  # why there is nothing to recover into, when there is not
        self.shrunk_to: int | None = None  # the nodes the run trains on after a shrink
        self.replacing = False  # it shrank to train on while the lost nodes' replacements boot: grow back at once
        self.removals: list[threading.Thread] = []  # the lost nodes' removals, off the critical path

    def run(self, outcome: Outcome, spent: str = "") -> Restart | None:
        """`spent`: why a lost node may not be replaced (a budget that is used up); then it only says so."""
        started, began_at = time.monotonic(), time.time()
        # The replacements first: each records itself in the cluster's state as it comes up, and the swap
        # rewrites the master's hostfile from the state read here.
        ready = {address: r.wait() for address, r in self.replacements.items()}
        cluster = self.ctx.state.load()
        if cluster is None or not cluster.ready:
            return None  # `down --force` is taking the cluster away: nothing to recover into
        lost = lost_nodes(self.ctx, cluster, self.shell, {a: e.reason for a, e in self.noticed.items()})
        if lost and len(lost) == len(cluster.nodes):
            # No survivor holds a checkpoint or the run: that is the cluster gone, not a node.
            self.verdict = f"every node is gone ({'; '.join(f'{n.name}: {why}' for n, why in lost)})"
            return None
        if not lost:
            return None
        names = ", ".join(node.name for node, _ in lost)
        if spent:
            self.verdict = f"lost {names} ({'; '.join(why for _, why in lost)}) and did not replace it: {spent}"
            return None
        self.ctx.reporter.warn(f"run {self.plan.run} lost {names} ({'; '.join(why for _, why in lost)}); recovering")
        master = cluster.node_list()[0]
        survived = master if all(node.name != master.name for node, _ in lost) else None
        last = last_step(self.shell, survived, RemoteLayout(self.plan.home), self.plan.run, self.reported_step)
        self.shell.close()  # connections to the lost nodes are dead; every use below reconnects
        step, swapped = self._replace(cluster, lost, ready)
        stopped = outcome.last(StoppedEvent)
        lost_steps = 0 if stopped is not None and stopped.step == step else max(0, last - (step or 0))
        return Restart(node=names, reason="; ".join(why for _, why in lost), from_step=step,
                       seconds=time.monotonic() - started, lost_steps=lost_steps, replacement=", ".join(swapped),
                       began_at=began_at, kind=RestartKind.INTERRUPTION, nodes_after=self.shrunk_to,
                       replacing=self.replacing)

    def _replace(self, cluster: ClusterRecord, lost: list[tuple[Node, str]],
                 ready: dict[str, Node | None]) -> tuple[int | None, list[str]]:
        step: int | None = None
        swapped, rest = [], []
        for node, why in lost:
            new = ready.get(node.private_ip)
            if new is not None:
                step = swap_in(self.ctx, cluster, self.shell, node, new, self.run_dir, self._remove_later)
                swapped.append(new.name)
            else:
                rest.append((node, why))
        if rest and self._trains_on(cluster, [node for node, _ in rest]):
            return self._train_on(cluster, [node for node, _ in rest]), swapped
        if rest:
            try:
                replace_lost(self.ctx, cluster, self.shell, rest, self.plan.run)
            except TrainingError as exc:
                return self._without(cluster, [node for node, _ in rest], exc), swapped
            with self.ctx.reporter.step("restore the newest checkpoint to every node"):
                step = restore_checkpoint(self.ctx, self.shell, cluster.node_list(), self.run_dir)
            swapped += [node.name for node, _ in rest]
        return step, swapped

    def _trains_on(self, cluster: ClusterRecord, gone: list[Node]) -> bool:
        """Whether the run goes on without `gone` while their replacements boot: workers only, down to
        --min-nodes (below it the replacement is waited for, as without --train-while-replacing). A node
        whose replacement already failed to launch is a question of capacity: asked once more, as without."""
        failed = {address for address, r in self.replacements.items() if r.error}
        return (self.train_on and can_shrink(cluster, gone) and len(cluster.nodes) - len(gone) >= self.min_nodes
                and not any(node.private_ip in failed for node in gone))

    def _train_on(self, cluster: ClusterRecord, gone: list[Node]) -> int | None:
        """The run goes on without `gone` now; the growth that follows launches their replacements."""
        self.replacing, self.shrunk_to = True, len(cluster.nodes) - len(gone)
        self.ctx.reporter.warn(f"training on with {self.shrunk_to} node(s) while "
                               f"{', '.join(node.name for node in gone)} is replaced")
        return shrink(self.ctx, cluster, self.shell, gone, self.run_dir, remove=self._remove_later)

    def _without(self, cluster: ClusterRecord, gone: list[Node], exc: TrainingError) -> int | None:
        """No replacement for `gone`: train on without them, or below --min-nodes wait for capacity."""
        if not can_shrink(cluster, gone):
            raise exc
        names = {node.name for node in gone}
        left = len([n for n in cluster.node_list() if n.name not in names])
        if left >= self.min_nodes:
            self.ctx.reporter.warn(f"{exc.message.split(';')[0]}: training on with {left} node(s)")
            self.shrunk_to = left
            return shrink(self.ctx, cluster, self.shell, gone, self.run_dir)
        shrink(self.ctx, cluster, self.shell, gone, self.run_dir)  # the record says what is left while it waits
        wait_for_floor(self.ctx, lambda: launch_missing(self.ctx, cluster, self.shell), self.min_nodes, left,
                       exc.message.split(";")[0], self.cancelled)
        return rejoin(self.ctx, cluster, self.shell, self.run_dir, "restore the newest checkpoint to every node")

    def _remove_later(self, node: Node) -> None:
        """The noticed node is out of the job: terminating it (and waiting for that) is off the
        critical path. Not a daemon thread: the agent waits for it before it exits."""
        def remove() -> None:
            try:
                remove_node(self.ctx.provider, self.ctx.config, node)
            except Exception as exc:  # noqa: BLE001 - EC2 reclaims it anyway; `down` finds it by tag otherwise
                self.ctx.reporter.warn(f"could not remove {node.name} ({node.id}): {exc}")
        removal = threading.Thread(target=remove, name=f"xc-remove-{node.name}")
        removal.start()
        self.removals.append(removal)
