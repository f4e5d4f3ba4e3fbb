"""`xeoncluster down`: remove everything the cluster owns, found by name/tag even without state."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.removals import Removal, find_removal, record_removal
from xeoncluster.cluster.state import ClusterRecord, ClusterStatus, StateDir
from xeoncluster.core.errors import BusyError, XeonClusterError
from xeoncluster.providers.abilities import AgentOnMaster, PurgesImages
from xeoncluster.providers.base import Removed
from xeoncluster.runs import client
from xeoncluster.runs.queue_order import busy_line


@dataclass(frozen=True)
class DownResult:
    cluster: str
    removed: Removed
    earlier: Removal | None = None  # removed before, by `down` or by itself, as this machine saw
    kept: tuple[str, ...] = ()       # where the cluster's results and stored runs still are


def run(ctx: CommandContext, purge_images: bool = False, force: bool = False, search: bool = False) -> DownResult:
    """Refused while another command (a `train`, an `up`) holds the cluster, unless `force`. A cluster
    this machine already removed is not searched for again, unless `search` (--provider given)."""
    name = ctx.config.name
    earlier = None if search or ctx.state.exists() else find_removal(name)
    if earlier is not None:
        return DownResult(name, Removed(), earlier)
    hint = f"wait for it to finish, or `xeoncluster down --name {name} --force` to stop it and remove the cluster"
    with ctx.state.lock("down", force=force, busy_hint=hint) as holder:
        if holder is not None:
            ctx.reporter.warn(f"{holder} is running on cluster '{name}'; removing the cluster anyway (--force)")
        _refuse_active_run(ctx, force)
        return remove_cluster(ctx, purge_images)


def _refuse_active_run(ctx: CommandContext, force: bool) -> None:
    record = _readable_record(ctx)
    pending = client.line_or_empty(ctx, record) if record is not None and record.nodes else []
    if not pending:
        return
    name = ctx.config.name
    what = busy_line(pending)
    if not force:
        first = pending[0].run
        raise BusyError(f"cluster '{name}' is busy: {what}",
                        hint=f"`xeoncluster cancel {first} --name {name}` stops it with a checkpoint (`cancel --all` "
                             f"empties the queue too); `xeoncluster down --name {name} --force` removes the cluster "
                             "anyway")
    ctx.reporter.warn(f"{what}; removing the cluster anyway (--force)")


def _kept(ctx: CommandContext) -> tuple[str, ...]:
    """`down` never deletes results: say where they are."""
    record = _readable_record(ctx)
    results = ctx.state.home / "results" / ctx.config.name
    kept: tuple[str, ...] = (f"results: {results}",) if results.is_dir() else ()
    if record is not None and record.storage is not None:
        kept += (f"runs kept in {record.storage.where(ctx.config.name)} (`xeoncluster storage ls`)",)
    return kept


def remove_cluster(ctx: CommandContext, purge_images: bool = False, by: str = "down", detail: str = "") -> DownResult:
    """Everything the cluster owns, then its state; the removal is recorded with `by` and `detail`."""
    kept = _kept(ctx)
    record = _readable_record(ctx)
    config = record.config if record is not None else ctx.config.model_dump(mode="json")
    _mark_removing(ctx)
    with ctx.reporter.step(f"removing cluster '{ctx.config.name}'"):
        # This machine's agents first: one must not start recovering while the nodes go away.
        agents = [] if isinstance(ctx.provider, AgentOnMaster) else client.stop_local_agents(str(ctx.state.home),
                                                                                   ctx.config.name, os.getpid())
        removed = ctx.provider.terminate(ctx.config).merge(Removed({"run agents": [str(pid) for pid in agents]}))
        if purge_images and isinstance(ctx.provider, PurgesImages):
            removed = removed.merge(ctx.provider.purge_images(ctx.config))
        ctx.state.remove()
    record_removal(Removal(cluster=ctx.config.name, provider=ctx.config.provider, at=time.time(), by=by,
                           detail=detail, config=config))
    return DownResult(ctx.config.name, removed, kept=kept)


def _readable_record(ctx: CommandContext) -> ClusterRecord | None:
    try:
        return ctx.state.load()
    except XeonClusterError:
        return None


def _mark_removing(ctx: CommandContext) -> None:
    """A run that `--force` pulls the nodes from must see a removal, not node losses to recover from."""
    try:
        record = ctx.state.load()
    except XeonClusterError:
        return
    if record is not None:
        record.status = ClusterStatus.REMOVING
        ctx.state.save(record)


def forget(name: str) -> None:
    """No cluster to remove, but a state folder may remain (logs of a rolled-back up, a corrupt state.json)."""
    state = StateDir(name)
    if state.path.exists():
        with state.lock("down"):
            state.remove()
