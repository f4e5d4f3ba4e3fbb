"""`up` on a cluster that is up: it repairs nodes that died or vanished, grows to --nodes, and takes
new --idle-minutes/--max-hours/--max-cost/--orphan-minutes in place. A repair holds the run queue
(runs/queue_hold.py), so no queued run starts on the cluster while its nodes change."""
from __future__ import annotations

import time
from dataclasses import dataclass

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.image import ImagePlan
from xeoncluster.cluster.master_lease import STALE_SECONDS, LeaseBook
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import BusyError, ConfigError
from xeoncluster.operations.repair import RepairResult, health, repair
from xeoncluster.providers.base import Node
from xeoncluster.providers.registry import spec_for
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs import client
from xeoncluster.runs.queue_hold import queue_held
from xeoncluster.runs.record import RunRecord
from xeoncluster.runs.watch_client import keep_watch
from xeoncluster.wire.contract import VERSION


@dataclass
class UpResult:
    cluster: str
    nodes: list[Node]
    image: ImagePlan | None
    already_up: bool = False
    seconds: float = 0.0
    repaired: RepairResult | None = None
    autostop: str = ""  # when the cluster removes itself



def already_up(ctx: CommandContext, record: ClusterRecord) -> UpResult:
    """A cluster that is up: replace nodes that died or vanished, add workers up to --nodes."""
    if ctx.config.nodes < len(record.nodes):
        raise ConfigError(f"cluster '{record.name}' has {len(record.nodes)} nodes; shrinking to "
                          f"{ctx.config.nodes} is not supported", hint="`down` first, or pick another --name")
    active = client.active_or_none(ctx, record)
    if active is not None and upgrade_agent(ctx, record, active.run):
        return UpResult(record.name, record.node_list(), None, already_up=True)
    _refuse_under(active, record)
    shell = ctx.shell()
    try:
        dead = [h for h in health(ctx, record, shell) if not h.alive]
        if not dead and ctx.config.nodes == len(record.nodes):
            ctx.reporter.info(f"cluster '{record.name}' is already up; nothing to do")
            return UpResult(record.name, record.node_list(), None, already_up=True,
                            autostop=rewatch(ctx, record, shell))
        with queue_held(ctx, record):
            _refuse_under(client.active_or_none(ctx, record), record)  # a queued run may have started since
            ctx.reporter.attach_log(ctx.state.new_log("up"))
            for item in dead:
                ctx.reporter.warn(f"{item.node.name} is down ({item.reason}); replacing it")
            result = repair(ctx, record, shell, [h.node for h in dead], ctx.config.nodes)
            hand_lease(ctx, record, next((h.node for h in dead if h.node.is_master), None))
            autostop = rewatch(ctx, record, shell)
    finally:
        shell.close()
    return UpResult(record.name, record.node_list(), None, seconds=result.seconds, repaired=result, autostop=autostop)


def hand_lease(ctx: CommandContext, record: ClusterRecord, lost: Node | None) -> None:
    """The lease of a lost master goes to the one put in its place, before its watch agent starts: left to
    the lost one, it fences the new master's watch agent at its first beat (cluster/master_lease.py), and
    the workers it then never beats power themselves off."""
    new = record.master
    if lost is None or new is None or record.storage is None:
        return
    book = LeaseBook(ctx.provider.open_storage(record.storage), record.name, spec_for(ctx.config.provider).instance_id,
                     ctx.reporter.warn)
    if book.take(new.id, new.name, time.time(), STALE_SECONDS, force_from=lost.id) is None:
        ctx.reporter.warn(f"the master lease is held by another node than the lost {lost.name}; "
                          f"the new {new.name} does not act as master until it is free")


def _refuse_under(active: RunRecord | None, record: ClusterRecord) -> None:
    if active is not None:
        raise BusyError(f"cluster '{record.name}' is busy: run {active.run} is {active.state.value}; its agent "
                        "replaces lost nodes itself", hint=f"`xeoncluster cancel {active.run} --name {record.name}` "
                        "first to change the cluster")


def upgrade_agent(ctx: CommandContext, record: ClusterRecord, active: str) -> bool:
    """An agent older than this CLI is replaced while a run is at work: the run's own agent goes on with
    the code it started with (each version has its folder); the watcher and later runs take the new one."""
    shell = ctx.shell()
    try:
        if client.host_for(ctx, shell, record).agent_version >= VERSION:
            return False
        rewatch(ctx, record, shell)
    finally:
        shell.close()
    ctx.reporter.info(f"upgraded the agent of cluster '{record.name}' to version {VERSION}; run {active} goes on")
    return True


def rewatch(ctx: CommandContext, record: ClusterRecord, shell: NodeShell) -> str:
    """`up --idle-minutes/--max-hours/--max-cost` on a cluster that is up: its settings change in place."""
    settings = {"idle_minutes": ctx.config.idle_minutes, "max_hours": ctx.config.max_hours,
                "max_cost": ctx.config.max_cost}
    if any(record.config.get(key) != value for key, value in settings.items()):
        record.config.update(settings)
        ctx.state.save(record)
    return keep_watch(ctx, shell, record).describe()
