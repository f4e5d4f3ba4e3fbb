"""Grow and repair a cluster in place: replace dead or missing nodes under their names, add workers.

`up` uses it on a cluster that is already up; `train` uses it to replace a node it lost. The same code
serves every provider: it only needs the provider to remove one node and launch nodes by index.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.playbook import load_playbooks
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.operations.launch_ceiling import check_ceiling
from xeoncluster.operations.up_nodes import add_nodes, check_mesh, playbook_runner, write_cluster_files
from xeoncluster.providers.abilities import loss_reason, remove_node
from xeoncluster.providers.base import Image, LaunchRequest
from xeoncluster.providers.node_kinds import Node, Role, by_index
from xeoncluster.remote.shell import NodeShell


@dataclass(frozen=True)
class NodeHealth:
    node: Node
    alive: bool
    reason: str = ""


@dataclass
class RepairResult:
    replaced: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.replaced or self.added)


def health(ctx: CommandContext, record: ClusterRecord, shell: NodeShell) -> list[NodeHealth]:
    """Each recorded node: alive if the provider still has it running and it answers over SSH. When the
    provider does not answer, SSH alone decides: a node that answers is never taken for lost."""
    try:
        live = {n.name: n for n in ctx.provider.nodes(ctx.config, priced=False)}
    except XeonClusterError as exc:
        return [_by_ssh_only(shell, node, exc) for node in record.node_list()]
    result = []
    for node in record.node_list():
        current = live.get(node.name)
        if current is None or current.id != node.id:
            result.append(NodeHealth(node, False, loss_reason(ctx.provider, ctx.config, node)))
        elif not current.state.is_running():
            result.append(NodeHealth(node, False, f"{current.state}"))
        else:
            result.append(NodeHealth(node, *answers(shell, node)))
    return result


def _by_ssh_only(shell: NodeShell, node: Node, provider_error: XeonClusterError) -> NodeHealth:
    alive, why = answers(shell, node)
    return NodeHealth(node, alive, "" if alive else f"{why} (and the provider did not answer: "
                                                    f"{provider_error.one_line()})")


def answers(shell: NodeShell, node: Node) -> tuple[bool, str]:
    try:
        out = shell.run([node], "true")[node.name]
    except XeonClusterError as exc:
        return False, exc.message.split(": ", 1)[-1]
    return (True, "") if out.ok else (False, out.last_line())


def repair(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, dead: list[Node],
           grow_to: int, trust_first_use: bool = True) -> RepairResult:
    """Replace `dead` under the same names and add workers up to `grow_to`; then rewrite the master's
    files and check reach again. New nodes this call launched are removed again if it fails.
    `trust_first_use`: as for up_nodes.host_key (False on the cluster's agents)."""
    started = time.monotonic()
    result = RepairResult()
    try:
        _replace(ctx, record, shell, dead, result, trust_first_use)
        _grow(ctx, record, shell, grow_to, result, trust_first_use)
        _configure_new(ctx, record, shell, result.replaced + result.added)
        with ctx.reporter.step("write ssh config and hostfile on the master"):
            write_cluster_files(ctx, record.node_list(), shell)
        with ctx.reporter.step("check the master reaches every node by name"):
            check_mesh(ctx, record.node_list(), shell)
    except (Exception, KeyboardInterrupt):
        remove_new(ctx, record, result.replaced + result.added)
        raise
    record.config["nodes"] = len(record.nodes)
    record.replaced = sorted(set(record.replaced) | set(result.replaced))
    ctx.state.save(record)
    result.seconds = time.monotonic() - started
    return result


def _replace(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, dead: list[Node],
             result: RepairResult, trust_first_use: bool) -> None:
    for node in by_index(dead):
        with ctx.reporter.step(f"replace {node.name}"):
            remove_node(ctx.provider, ctx.config, node)
            record.set_nodes([n for n in record.node_list() if n.name != node.name])
            ctx.state.forget_host(node.name)
            ctx.state.save(record)
            result.replaced.append(node.name)
            check_ceiling(ctx, record, 1)
            # A lost master's successor goes where the survivors are: one zone for the gradients.
            near = record.master or next(iter(record.node_list()), None)
            new = ctx.provider.launch(LaunchRequest(ctx.config, 1, recorded_image(record), node.role, node.index,
                                      near=near, base=recorded_base(record), replacement=True))
            add_nodes(ctx, record, new, shell, trust_first_use)
            record.set_nodes(by_index(record.node_list()))


def _grow(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, grow_to: int, result: RepairResult,
          trust_first_use: bool) -> None:
    count = grow_to - len(record.nodes)
    if count <= 0:
        return
    first = max(n.index for n in record.node_list()) + 1
    with ctx.reporter.step(f"add {count} worker(s)"):
        result.added.extend(f"node{first + i}" for i in range(count))
        check_ceiling(ctx, record, count, size=grow_to)
        new = ctx.provider.launch(LaunchRequest(ctx.config, count, recorded_image(record), Role.WORKER, first,
                                                near=record.master, base=recorded_base(record)))
        add_nodes(ctx, record, new, shell, trust_first_use)


def _configure_new(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, names: list[str]) -> None:
    """Nodes launched from the cluster's image are ready; without an image they run the playbooks."""
    new = [n for n in record.node_list() if n.name in names]
    if new and recorded_image(record) is None:
        with ctx.reporter.step(f"configure {', '.join(n.name for n in new)} (playbooks)"):
            playbook_runner(ctx, shell).run_all(load_playbooks(), new, ctx.reporter.detail)


def remove_new(ctx: CommandContext, record: ClusterRecord, names: list[str]) -> None:
    for node in [n for n in record.node_list() if n.name in names]:
        try:
            remove_node(ctx.provider, ctx.config, node)
        except Exception as exc:  # noqa: BLE001 - the original failure matters more; `down` finds the rest
            ctx.reporter.log(f"could not remove {node.name} after a failed repair: {exc}")
        record.set_nodes([n for n in record.node_list() if n.name != node.name])
    ctx.state.save(record)


def recorded_image(record: ClusterRecord) -> Image | None:
    return record.image.image if record.image else None


def recorded_base(record: ClusterRecord) -> str | None:
    return record.image.base if record.image else None

