"""Bring what a master's run agent changed back to this machine's state, without asking the master.

The agent replaces nodes on its own, with no CLI attached: this machine's record then still names
the lost node, and has no pinned host key for the new one. When the provider's list of nodes no
longer matches the record, the record is rebuilt from that list alone. The master is not asked: it
runs the user's code, and whatever it says about nodes or keys could be anyone's. A node this
machine knew (same name, same instance) keeps the key pinned here; any other gets the key the
provider shows out of band (the instance console on AWS, as `up` reads it), or is left out of
ssh_config and known_hosts until it shows one: never trust on first use here. A lost node no new one
replaced stays recorded, as `up` needs it to replace it under its name.

The master too may be new: when the one recorded here is no longer running, a worker takes its place
(agent/takeover.py) and launches a successor under its name and role. That one instance, and no other,
is followed as the master; two running masters leave the record as it is.
"""
from __future__ import annotations

from typing import Protocol

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.cluster_files import known_hosts, preferred_key, read_known, user_ssh_config
from xeoncluster.cluster.state import ClusterRecord, StateDir, atomic_write
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.core.progress import Reporter
from xeoncluster.providers.abilities import AgentOnMaster, host_keys
from xeoncluster.providers.base import Node, Provider
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.registry import spec_for
from xeoncluster.remote.shell import SshIdentity


class ClusterView(Protocol):
    """What a refresh reads of a command's context (CommandContext is one)."""

    config: ClusterConfig
    state: StateDir
    provider: Provider
    reporter: Reporter

    def identity(self) -> SshIdentity: ...


def refresh(ctx: ClusterView, record: ClusterRecord) -> ClusterRecord:
    if not isinstance(ctx.provider, AgentOnMaster) or not record.nodes:
        return record
    try:
        listed = ctx.provider.nodes(ctx.config, priced=False)
    except XeonClusterError:
        return record
    known = {n.name: n.id for n in record.node_list()}
    if {(n.name, n.id) for n in listed} == set(known.items()):
        return record
    owned = _owned(ctx, listed, record.owner)
    master_id = _master_id(owned, record.master)
    live = _trusted(ctx, owned, known, master_id)
    master = record.master
    if master is None or master.name not in live or live[master.name].id != master_id:
        return record  # no master: no agent at work; `status` and `up` say what is gone
    pins = read_known(ctx.state)
    keys = _keys(ctx, live, known, pins)
    lost = _still_lost(record, live, len(keys), pins)
    keys |= {n.name: pins[n.name] for n in lost}
    nodes = sorted([live[name] for name in keys if name in live] + lost, key=lambda n: n.index)
    record.set_nodes(nodes)
    record.replaced = sorted(set(record.replaced) | {n.name for n in nodes if known.get(n.name) != n.id})
    atomic_write(ctx.state.known_hosts, known_hosts([(n, keys[n.name]) for n in nodes]))
    atomic_write(ctx.state.ssh_config, user_ssh_config(nodes, ctx.identity().user, ctx.state.key,
                                                       ctx.state.known_hosts))
    ctx.state.save(record)
    return record


def _still_lost(record: ClusterRecord, live: dict[str, Node], have: int, pins: dict[str, str]) -> list[Node]:
    """Recorded nodes the provider no longer lists, as long as no new node took their place (the cluster's
    size is this machine's record of it): kept, so that `up` replaces them under their names."""
    size = int(record.config.get("nodes", len(record.nodes)))
    lost = [n for n in record.node_list() if n.name not in live and n.name in pins]
    return lost[:max(0, size - have)]


def _owned(ctx: ClusterView, listed: list[Node], owner: str | None) -> list[Node]:
    """The provider's nodes whose owner is the record's: an instance carrying our cluster's tag that
    a colleague or a master's role launched for someone else is not a node of ours. A record made
    before owners were recorded has none to compare with."""
    if not owner:
        return listed
    others = [n for n in listed if n.owner != owner]
    for node in others:
        ctx.reporter.warn(f"{node.id} carries cluster {ctx.config.name}'s tag but its owner is "
                          f"{node.owner!r}, not the cluster's ({owner}); left out")
    return [n for n in listed if n.owner == owner]


def _master_id(listed: list[Node], master: Node | None) -> str | None:
    """The recorded master's id while it runs; once it does not, its successor's: the one running
    instance with the master's role and name."""
    if master is None:
        return None
    running = [n for n in listed if n.state.is_running()]
    if any(n.id == master.id for n in running):
        return master.id
    successors = [n for n in running if n.is_master and n.name == master.name]
    return successors[0].id if len(successors) == 1 else None


def _trusted(ctx: ClusterView, listed: list[Node], known: dict[str, str], master_id: str | None) -> dict[str, Node]:
    """The provider's running nodes whose every field passes its rule, one per name. Instances carry the
    tags the master's role gave them at launch, so a name, role or address there is checked like the rest."""
    id_rule = spec_for(ctx.config.provider).instance_id
    source = f"the provider's list of {ctx.config.name}'s nodes"
    by_name: dict[str, list[Node]] = {}
    for node in (n for n in listed if n.state.is_running()):  # a pending one has no address yet
        try:
            untrusted.node(node, source, id_rule)
            if node.is_master != (node.id == master_id):
                raise untrusted.refused(source, f"{node.name}'s role", node.role, "not the cluster's master")
        except untrusted.Refused as exc:
            ctx.reporter.warn(f"{exc.message}; left out")
            continue
        by_name.setdefault(node.name, []).append(node)
    live = {}
    for name, nodes in by_name.items():
        mine = [n for n in nodes if n.id == known.get(name)]
        if len(nodes) > 1:
            ctx.reporter.warn(f"the provider lists {len(nodes)} instances named {name}; "
                              + ("keeping the one this machine knows" if mine else "none of them is used"))
        if len(nodes) == 1 or mine:
            live[name] = (mine or nodes)[0]
    return live


def _keys(ctx: ClusterView, live: dict[str, Node], known: dict[str, str], pins: dict[str, str]) -> dict[str, str]:
    """This machine's pin for a node it knew; the provider's out-of-band key for any other."""
    keys = {}
    for name, node in live.items():
        if known.get(name) == node.id and name in pins:
            keys[name] = pins[name]
            continue
        offered = [k for k in host_keys(ctx.provider, node) if untrusted.HOST_KEY.fullmatch(k)]
        if offered:
            keys[name] = preferred_key(offered)
        else:
            ctx.reporter.warn(f"{name} ({node.id}) shows no host key out of band (its console); it is left out "
                              "of ssh_config and known_hosts until it does")
    return keys
