"""The CLI's side of the cluster's watch agent: write its settings, start it where the run agents live
(the master on a cloud, this machine for local nodes) unless it already runs, and read what it saw."""
from __future__ import annotations

import shlex

from xeoncluster.cluster.autostop import SETTINGS, STATUS, AutoStop, WatchStatus
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.providers.registry import spec_for
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs import client
from xeoncluster.runs.host import AgentHost
from xeoncluster.wire.contract import VERSION, is_agent
from xeoncluster.wire.layout import AgentLayout


def settings_for(ctx: CommandContext, record: ClusterRecord) -> AutoStop:
    switch = spec_for(ctx.config.provider).poweroff is not None and ctx.config.orphan_minutes > 0
    return AutoStop(idle_minutes=ctx.config.idle_minutes, max_hours=ctx.config.max_hours or None,
                    created_at=record.created_at, orphan_minutes=ctx.config.orphan_minutes if switch else None,
                    max_cost=ctx.config.max_cost or None)


def folder(host: AgentHost, cluster: str) -> str:
    return AgentLayout(host.home).cluster(cluster)


def keep_watch(ctx: CommandContext, shell: NodeShell, record: ClusterRecord) -> AutoStop:
    """The cluster's current settings where its watch agent reads them, and the agent running (a
    running one picks new settings up at its next check; with both off it ends by itself)."""
    settings = settings_for(ctx, record)
    host = client.host_for(ctx, shell, record)
    older = host.agent_version < VERSION
    client.install(ctx, shell, host, record)
    if older:
        stop_watcher(host, ctx.config.name)
    where = folder(host, ctx.config.name)
    host.write(f"{where}/{SETTINGS}", settings.model_dump_json(indent=1))
    if not settings.off and not watcher_alive(host, ctx.config.name):
        host.start(f"xeoncluster-watch-{ctx.config.name}", ["watch", ctx.config.name], f"{where}/watch.log")
    return settings


def read_status(host: AgentHost, cluster: str) -> tuple[AutoStop, WatchStatus | None] | None:
    where = shlex.quote(folder(host, cluster))
    settings = host.run(f"cat {where}/{SETTINGS} 2>/dev/null")
    if not settings.ok:
        return None
    status = host.run(f"cat {where}/{STATUS} 2>/dev/null")
    try:
        return AutoStop.model_validate_json(settings.stdout), \
            WatchStatus.model_validate_json(status.stdout) if status.ok else None
    except ValueError:
        return None


def watcher_alive(host: AgentHost, cluster: str) -> bool:
    found = read_status(host, cluster)
    status = found[1] if found else None
    if status is None or status.pid is None or status.state == "off":
        return False
    return "alive" in host.run(f"{is_agent(status.pid, 'watch')} && echo alive").stdout


def stop_watcher(host: AgentHost, cluster: str) -> None:
    """A watcher gives way: an older agent's to this version's (a run agent at work keeps its own code), and a
    master's that handed over to its successor's."""
    found = read_status(host, cluster)
    status = found[1] if found else None
    if status is not None and status.pid is not None:
        host.run(f"{is_agent(status.pid, 'watch')} && kill {int(status.pid)}; true")


def removing(host: AgentHost, cluster: str) -> bool:
    """The watch agent is removing the cluster: nothing new may start on it."""
    found = read_status(host, cluster)
    return bool(found and found[1] and found[1].state == "removing" and watcher_alive(host, cluster))
