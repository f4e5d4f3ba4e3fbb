"""`xeoncluster exec`: one command on the chosen nodes in parallel, each line handed back as it comes."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.base import Node

LineSink = Callable[[str, str], None]


@dataclass(frozen=True)
class ExecResult:
    exit_codes: dict[str, int]

    @property
    def failed(self) -> dict[str, int]:
        return {name: code for name, code in self.exit_codes.items() if code != 0}

    @property
    def exit_code(self) -> int:
        """The worst node's exit code."""
        return max(self.failed.values(), default=0)


def target_nodes(ctx: CommandContext, only: list[str]) -> list[Node]:
    record = ctx.require_up(ready=False)
    nodes = record.node_list()
    unknown = sorted(set(only) - {n.name for n in nodes})
    if unknown:
        raise ConfigError(f"--node: no node {', '.join(unknown)} in cluster '{record.name}'")
    return [n for n in nodes if not only or n.name in only]


def run(ctx: CommandContext, nodes: list[Node], command: str, sink: LineSink) -> ExecResult:
    shell = ctx.shell()
    try:
        results = shell.stream(nodes, command, sink)
    finally:
        shell.close()
    return ExecResult({name: r.exit_code for name, r in results.items()})
