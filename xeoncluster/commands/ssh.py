"""`xeoncluster ssh`: the argv that opens a shell (or runs a command) on one node with pinned keys."""
from __future__ import annotations

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import ConfigError


def run(ctx: CommandContext, node: str, command: tuple[str, ...]) -> list[str]:
    """The ssh argv for the CLI to exec; the cluster's ssh_config pins every host key strictly."""
    record = ctx.require_up(ready=False)
    names = [n.name for n in record.nodes]
    if node not in names:
        raise ConfigError(f"no node '{node}' in cluster '{ctx.config.name}'; nodes: {', '.join(names)}")
    return ["ssh", "-F", str(ctx.state.ssh_config), node, *command]
