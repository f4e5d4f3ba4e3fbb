"""Train on with fewer nodes: a lost worker that cannot be replaced (no capacity in the cluster's zone,
and the config keeps the cluster there) leaves the run on the nodes it still has. The lost nodes leave the
cluster's record (its configured size stays, so that the run grows back, agent/regrowth.py, and `up`
repairs it); the master's hostfile and ssh config name the survivors, and every survivor gets the newest
checkpoint. The relaunch keeps the run's global batch (node/startup/elastic_batch.py).

Below the run's --min-nodes it waits instead, checkpointed and stored, asking for capacity with backoff,
until a replacement comes or the run is cancelled."""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from xeoncluster.agent.recovery import restore_checkpoint
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import TrainingError, XeonClusterError
from xeoncluster.operations.up_nodes import check_mesh, write_cluster_files
from xeoncluster.providers.abilities import remove_node
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import NodeShell

FIRST_WAIT_SECONDS = 20.0
LONGEST_WAIT_SECONDS = 600.0


@dataclass(frozen=True)
class ShrinkRule:
    """When a run trains on with fewer nodes: `min_nodes` (--min-nodes), the fewest it trains on; and
    `while_replacing` (--train-while-replacing), also while a lost worker's replacement starts, not only when
    none is to be had."""

    min_nodes: int = 1
    while_replacing: bool = False


def backoff(first: float = FIRST_WAIT_SECONDS, longest: float = LONGEST_WAIT_SECONDS) -> Callable[[], float]:
    """Each call the next wait: doubling from `first`, never above `longest`."""
    waits = [first]

    def next_wait() -> float:
        wait = waits[0]
        waits[0] = min(wait * 2, longest)
        return wait
    return next_wait


def can_shrink(record: ClusterRecord, lost: list[Node]) -> bool:
    """Only workers: the master holds the job's launcher (and, on a cloud, its agent)."""
    return bool(lost) and all(not node.is_master for node in lost) and record.master is not None


def shrink(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, lost: list[Node], run_dir: str,
           remove: Callable[[Node], None] | None = None) -> int | None:
    """Drop `lost` from the cluster (each through `remove`, default: removed now), rewrite the master's files
    for the survivors, check reach, and give every survivor the newest checkpoint; returns its step."""
    names = {node.name for node in lost}
    for node in lost:
        if remove is not None:
            remove(node)
        else:
            with contextlib.suppress(XeonClusterError):  # reclaimed already, or EC2 reclaims it: `down` finds it
                remove_node(ctx.provider, ctx.config, node)
        ctx.state.forget_host(node.name)
    record.set_nodes([n for n in record.node_list() if n.name not in names])
    ctx.state.save(record)
    return rejoin(ctx, record, shell, run_dir, f"train on with {len(record.nodes)} node(s) without "
                                               f"{', '.join(sorted(names))}")


def rejoin(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, run_dir: str, what: str) -> int | None:
    """The job's next launch on the cluster's nodes as they are now (fewer, or grown back): the master's
    hostfile and ssh config, reach, and the newest checkpoint on each; returns its step."""
    nodes = record.node_list()
    with ctx.reporter.step(what):
        write_cluster_files(ctx, nodes, shell)
        check_mesh(ctx, nodes, shell)
        return restore_checkpoint(ctx, shell, nodes, run_dir)


def wait_for_floor(ctx: CommandContext, replace: Callable[[], object], floor: int, have: int, why: str,
                   cancelled: Callable[[float], bool]) -> None:
    """Below the floor: ask for the lost nodes again and again (`replace`), with backoff, until they come.
    `cancelled(seconds)` waits that long and says whether the run was cancelled meanwhile."""
    wait = backoff()
    ctx.reporter.warn(f"{have} node(s) left, below --min-nodes {floor} ({why}): the run waits for capacity")
    while True:
        seconds = wait()
        if cancelled(seconds):
            raise TrainingError(f"cancelled while waiting for capacity ({have} node(s), --min-nodes {floor})")
        try:
            replace()
            return
        except XeonClusterError as exc:
            again = min(seconds * 2, LONGEST_WAIT_SECONDS)
            ctx.reporter.warn(f"still no capacity ({exc.message}); asking again in {again:.0f}s")
