"""`exec`: one command on the cluster's nodes in parallel, output handed back line by line."""
from __future__ import annotations

from typing import Callable

from .errors import ConfigError, XeonClusterError
from .providers.base import Node
from .remote import CommandResult
from .session import Session


def target_nodes(session: Session, only: list[str]) -> list[Node]:
    record = session.state.load()
    if record is None:
        raise XeonClusterError(f"cluster '{session.config.name}' is not up", hint="run `xeoncluster up` first")
    nodes = record.node_list()
    unknown = sorted(set(only) - {n.name for n in nodes})
    if unknown:
        raise ConfigError(f"--node: no node {', '.join(unknown)} in cluster '{record.name}'")
    return [n for n in nodes if not only or n.name in only]


def run_on_nodes(session: Session, nodes: list[Node], command: str,
                 sink: Callable[[str, str], None]) -> dict[str, CommandResult]:
    shell = session.shell()
    try:
        return shell.stream(nodes, command, sink)
    finally:
        shell.close()
