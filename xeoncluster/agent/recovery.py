"""Keep a run going when it loses a node: find which, replace it, restore the newest checkpoint.

A lost node is one the provider no longer runs or that stops answering, or one that announced it is
going away (a notice event). The replacement gets the newest checkpoint complete on any survivor:
DDP state is identical on every rank, and every checkpoint holds every rank's RNG state, so the
resumed run continues the same loss curve.
"""
from __future__ import annotations

import json
import shlex

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import TrainingError, XeonClusterError
from xeoncluster.operations.repair import health, repair
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import all_of, remote_command
from xeoncluster.remote.shell import NodeShell
from xeoncluster.wire.layout import RemoteLayout


def lost_nodes(ctx: CommandContext, record: ClusterRecord, shell: NodeShell,
               noticed: dict[str, str]) -> list[tuple[Node, str]]:
    """The nodes the run lost, with why: those that announced their end (`noticed`: private address ->
    reason), and those the provider no longer runs or that do not answer over SSH."""
    by_address = {n.private_ip: n for n in record.node_list()}
    lost = {by_address[address].name: (by_address[address], why) for address, why in noticed.items()
            if address in by_address}
    for item in health(ctx, record, shell):
        if not item.alive and item.node.name not in lost:
            lost[item.node.name] = (item.node, item.reason)
    return list(lost.values())


def last_step(shell: NodeShell, master: Node | None, layout: RemoteLayout, run: str, reported: int) -> int:
    """The last step rank 0 finished: its marker on the master (when it survived), else the last one
    the ranks reported."""
    try:
        if master is not None:
            out = shell.run([master], f"cat {shlex.quote(layout.run_dir(run))}/progress.json")[master.name]
            if out.ok:
                return max(reported, int(json.loads(out.stdout)["step"]))
    except (XeonClusterError, ValueError, KeyError):
        pass
    return reported


def checkpoint_steps(shell: NodeShell, nodes: list[Node], run_dir: str) -> dict[str, list[int]]:
    """Complete checkpoints (trainer state and weights) on each node."""
    command = (f"cd {shlex.quote(run_dir)} 2>/dev/null && for d in checkpoint-*; do "
               "[ -f \"$d/trainer_state.json\" ] && [ -f \"$d/model.safetensors\" ] && echo \"${d#checkpoint-}\"; "
               "done; true")
    results = shell.run(nodes, command)
    return {name: sorted(int(s) for s in r.stdout.split() if s.isdigit()) for name, r in results.items()}


def restore_checkpoint(ctx: CommandContext, shell: NodeShell, nodes: list[Node], run_dir: str) -> int | None:
    """Give every node the newest checkpoint complete on any node; returns its step."""
    held = checkpoint_steps(shell, nodes, run_dir)
    best = max((s for steps in held.values() for s in steps), default=None)
    if best is None:
        return None
    source = next(n for n in nodes if best in held[n.name])
    pack = remote_command("tar", "-C", run_dir, "-cf", "-", f"checkpoint-{best}")
    unpack = all_of(remote_command("mkdir", "-p", run_dir), remote_command("tar", "-C", run_dir, "-xf", "-"))
    for target in [n for n in nodes if best not in held[n.name]]:
        # From the master, which reaches every node by name with the cluster key; each side's command is
        # one word to ssh, which the far shell reads.
        copy = f"{remote_command('ssh', source.name, pack)} | {remote_command('ssh', target.name, unpack)}"
        result = shell.run([nodes[0]], copy)[nodes[0].name]
        if not result.ok:
            raise TrainingError(f"could not copy checkpoint-{best} from {source.name} to {target.name}: "
                                f"{result.last_line()}")
        ctx.reporter.detail(f"checkpoint-{best}: {source.name} -> {target.name}")
    return best


def replace_lost(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, lost: list[tuple[Node, str]],
                 run: str) -> None:
    try:
        repair(ctx, record, shell, [node for node, _ in lost], len(record.nodes), trust_first_use=False)
    except XeonClusterError as exc:
        names = ", ".join(node.name for node, _ in lost)
        raise TrainingError(f"lost {names} and could not replace it: {exc.message}; the checkpoints are kept",
                            hint=f"when capacity returns: xeoncluster up --name {ctx.config.name} && "
                                 f"xeoncluster train ... --name {ctx.config.name} --run {run} --resume",
                            log=ctx.reporter.log_path) from exc
