"""Bring what a master's run agent changed back to this machine's state.

The agent replaces nodes on its own, with no CLI attached: this machine's record then still names
the lost node, and has no pinned host key for the new one. When the provider's list of nodes no
longer matches the record, the agent's view is read from the master: its nodes (addressed as this
machine reaches them) and the host keys it pinned.
"""
from __future__ import annotations

from ..cluster_files import known_hosts, user_ssh_config
from ..commands.up_nodes import read_known
from ..context import CommandContext
from ..errors import XeonClusterError
from ..providers.base import Node
from ..state import ClusterRecord, atomic_write
from .host import AGENT_HOME


def refresh(ctx: CommandContext, record: ClusterRecord) -> ClusterRecord:
    if not ctx.provider.agent_on_master or not record.nodes:
        return record
    try:
        live = {n.name: n for n in ctx.provider.nodes(ctx.config, priced=False)}
    except XeonClusterError:
        return record
    if {(n.name, n.id) for n in live.values()} == {(n.name, n.id) for n in record.nodes}:
        return record
    master = next((n for n in record.node_list() if n.role == "master"), None)
    if master is None or master.name not in live:
        return record  # no master: no agent to ask; `status` and `up` say what is gone
    return _pull(ctx, record, live) or record


def _pull(ctx: CommandContext, record: ClusterRecord, live: dict[str, Node]) -> ClusterRecord | None:
    folder = f"~/{AGENT_HOME}/clusters/{record.name}"
    shell = ctx.shell()
    try:
        master = record.node_list()[0]
        out = shell.run([master], f"cat {folder}/state.json && printf '\\036' && cat {folder}/known_hosts")
    except XeonClusterError:
        return None
    finally:
        shell.close()
    result = out[master.name]
    if not result.ok:
        return None
    state_text, _, pins_text = result.stdout.partition("\x1e")
    try:
        agent = ClusterRecord.model_validate_json(state_text)
    except ValueError:
        return None  # no agent has run on this master yet: nothing of its to bring back
    nodes = [live.get(n.name, n) for n in agent.node_list()]  # as this machine reaches them
    pinned = {line.split(" ", 1)[0].split(",")[0]: line.split(" ", 1)[1]
              for line in pins_text.splitlines() if " " in line}
    known = read_known(ctx.state) | pinned
    record.set_nodes([n for n in nodes if n.name in known])
    record.replaced = sorted(set(record.replaced) | set(agent.replaced))
    atomic_write(ctx.state.known_hosts, known_hosts([(n, known[n.name]) for n in record.node_list()]))
    atomic_write(ctx.state.ssh_config, user_ssh_config(record.node_list(), ctx.identity().user, ctx.state.key,
                                                       ctx.state.known_hosts))
    ctx.state.save(record)
    return record
