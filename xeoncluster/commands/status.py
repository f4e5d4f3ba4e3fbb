"""`xeoncluster status`: each node from the provider's truth, and whether it answers over SSH."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.cluster.state_refresh import refresh
from xeoncluster.commands.self_removed import removed, what_remains
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.providers.abilities import AgentOnMaster
from xeoncluster.providers.base import Node
from xeoncluster.runs import client, watch_client
from xeoncluster.runs.record import RunRecord


@dataclass(frozen=True)
class NodeStatus:
    node: Node
    answers: bool
    detail: str = ""
    replaced: bool = False  # a replacement of a node the cluster lost


@dataclass(frozen=True)
class StatusResult:
    cluster: str
    provider: str
    nodes: tuple[NodeStatus, ...]
    run: RunRecord | None = None  # the run the cluster's agent is working on
    notes: tuple[str, ...] = ()
    gone: str = ""      # the cluster removed itself: when, why, and what is left
    autostop: str = ""  # when it will remove itself
    missing: tuple[str, ...] = ()  # recorded nodes the provider no longer has, and nothing replaced

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "provider": self.provider,
                "nodes": [asdict(r.node) | {"answers": r.answers, "detail": r.detail, "replaced": r.replaced}
                          for r in self.nodes],
                "run": self.run.summary() if self.run else None, "notes": list(self.notes), "gone": self.gone,
                "autostop": self.autostop, "missing": list(self.missing)}


def run(ctx: CommandContext) -> StatusResult:
    record = _record(ctx)
    if record is not None and record.nodes:
        record = refresh(ctx, record)  # nodes the master's agent replaced
    nodes = ctx.provider.nodes(ctx.config)
    running = [n for n in nodes if n.state.is_running()]
    reach = _reachability(ctx, running) if running and ctx.state.known_hosts.exists() else {}
    replaced = _replaced(ctx)
    rows = tuple(NodeStatus(n, *reach.get(n.name, (False, n.state)), replaced=n.name in replaced) for n in nodes)
    active, notes = _active_run(ctx, record, rows)
    removal = None if running else removed(ctx, record)
    gone = what_remains(ctx, removal, record) if removal else ""
    return StatusResult(ctx.config.name, ctx.config.provider, rows, active, notes, gone, _autostop(ctx, record, rows),
                        _missing(record, nodes))


def _missing(record: ClusterRecord | None, listed: list[Node]) -> tuple[str, ...]:
    """Nodes this machine's record names that the provider no longer lists: lost, and not replaced
    (the refresh above has already taken in any replacement the master's agent made)."""
    if record is None:
        return ()
    there = {n.name for n in listed}
    return tuple(n.name for n in record.node_list() if n.name not in there)


def _autostop(ctx: CommandContext, record: ClusterRecord | None, rows: tuple[NodeStatus, ...]) -> str:
    """When the cluster removes itself, and how idle it is, as its watch agent last saw it."""
    master = next((r for r in rows if r.node.is_master), None)
    if record is None or not record.nodes or master is None or not master.answers:
        return ""
    shell = ctx.shell()
    try:
        found = watch_client.read_status(client.host_for(ctx, shell, record, warn=True), ctx.config.name)
    except XeonClusterError:
        return ""
    finally:
        shell.close()
    if found is None:
        return ""
    settings, seen = found
    now = time.time()
    return settings.describe() + (f"; {seen.describe(settings, now)}" if seen and not settings.off else "")


def _record(ctx: CommandContext) -> ClusterRecord | None:
    try:
        return ctx.state.load()
    except XeonClusterError:
        return None


def _active_run(ctx: CommandContext, record: ClusterRecord | None,
                rows: tuple[NodeStatus, ...]) -> tuple[RunRecord | None, tuple[str, ...]]:
    if record is None or not record.nodes:
        return None, ()
    master = next((r for r in rows if r.node.is_master), None)
    if isinstance(ctx.provider, AgentOnMaster) and (master is None or not master.answers):
        return None, (f"the master (node0) does not answer, so neither does its run agent: `xeoncluster up --name "
                      f"{ctx.config.name}` repairs the cluster, then `xeoncluster train ... --run RUN --resume`",)
    return client.active_or_none(ctx, record), ()


def _replaced(ctx: CommandContext) -> set[str]:
    """Nodes replaced since `up`, from state; a state file that can't be read only loses this mark."""
    record = _record(ctx)
    return set(record.replaced) if record else set()


def _reachability(ctx: CommandContext, nodes: list[Node]) -> dict[str, tuple[bool, str]]:
    shell = ctx.shell()

    def probe(node: Node) -> tuple[bool, str]:
        try:
            out = shell.run([node], "true")[node.name]
            return out.ok, "ssh ok" if out.ok else out.last_line()
        except XeonClusterError as exc:
            return False, exc.message.split(": ", 1)[-1]

    try:
        with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
            return dict(zip((n.name for n in nodes), pool.map(probe, nodes), strict=True))
    finally:
        shell.close()


def check_all_up(result: StatusResult) -> None:
    """Exit 1 when a node does not answer, or is gone with nothing in its place: either way the cluster
    cannot run on all of its nodes until `up` repairs it."""
    down = [row.node.name for row in result.nodes if not row.answers]
    if not down and not result.missing:
        return
    said = ([f"{', '.join(down)} down"] if down else []) + (
        [f"{', '.join(result.missing)} gone (no longer listed by the provider, and not replaced)"]
        if result.missing else [])
    resume = ", then `xeoncluster train ... --run RUN --resume` resumes a run it stopped" if result.missing else ""
    raise XeonClusterError(f"cluster '{result.cluster}': {'; '.join(said)} ({len(down) + len(result.missing)} of "
                           f"{len(result.nodes) + len(result.missing)} node(s))",
                           hint=f"`xeoncluster up --name {result.cluster}` replaces them{resume}")
