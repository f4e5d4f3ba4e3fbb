"""Keep a training run going when it loses a node: find which, replace it, restore, resume.

A lost node is one the provider no longer runs or that stops answering, or one that received a spot
interruption notice (training then exits 75 after checkpointing the current step). The replacement
gets the newest checkpoint complete on any survivor: DDP state is identical on every rank, and every
checkpoint holds every rank's RNG state, so the resumed run continues the same loss curve.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

from ..context import CommandContext
from ..errors import TrainingError, XeonClusterError
from ..providers.base import Node
from ..remote import NodeShell
from ..remote_layout import RemoteLayout
from ..state import ClusterRecord
from .repair import health, repair

EXIT_INTERRUPTED = 75
NOTICE = re.compile(r"training: (spot interruption notice.*|stop requested) on (\S+)$", re.M)
STEP_LINE = re.compile(r"step (\d+)/\d+")


@dataclass(frozen=True)
class Restart:
    node: str
    reason: str
    from_step: int | None  # the checkpoint resumed from; None: from the start
    seconds: float
    lost_steps: int

    def describe(self) -> str:
        start = f"checkpoint-{self.from_step}" if self.from_step is not None else "the start (no checkpoint yet)"
        return (f"restart: {self.node} lost ({self.reason}); resuming from {start}, {self.lost_steps} step(s) "
                f"lost; recovery took {self.seconds:.0f}s")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def lost_nodes(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, exit_code: int,
               log_text: str) -> list[tuple[Node, str]]:
    """The nodes the run lost, with why. A notice names its node; otherwise ask the provider and SSH."""
    nodes = record.node_list()
    if exit_code == EXIT_INTERRUPTED:
        by_address = {n.private_ip: n for n in nodes}
        noticed = [(by_address[addr], why) for why, addr in NOTICE.findall(log_text) if addr in by_address]
        return list({n.name: (n, why) for n, why in noticed}.values())
    return [(h.node, h.reason) for h in health(ctx, record, shell) if not h.alive]


def last_step(shell: NodeShell, master: Node | None, layout: RemoteLayout, run: str, log_text: str) -> int:
    """The last step rank 0 finished: its marker on the master (when it survived), else the log's
    last progress line."""
    try:
        if master is not None:
            out = shell.run([master], f"cat {shlex.quote(layout.run_dir(run))}/progress.json")[master.name]
            if out.ok:
                return int(json.loads(out.stdout)["step"])
    except (XeonClusterError, ValueError, KeyError):
        pass
    steps = STEP_LINE.findall(log_text)
    return int(steps[-1]) if steps else 0


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
    quoted = shlex.quote(run_dir)
    for target in [n for n in nodes if best not in held[n.name]]:
        # From the master, which reaches every node by name with the cluster key.
        copy = (f"ssh {source.name} 'tar -C {quoted} -cf - checkpoint-{best}' | "
                f"ssh {target.name} 'mkdir -p {quoted} && tar -C {quoted} -xf -'")
        result = shell.run([nodes[0]], copy)[nodes[0].name]
        if not result.ok:
            raise TrainingError(f"could not copy checkpoint-{best} from {source.name} to {target.name}: "
                                f"{result.last_line()}")
        ctx.reporter.detail(f"checkpoint-{best}: {source.name} -> {target.name}")
    return best


def replace_lost(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, lost: list[tuple[Node, str]],
                 run: str) -> None:
    try:
        repair(ctx, record, shell, [node for node, _ in lost], len(record.nodes))
    except XeonClusterError as exc:
        names = ", ".join(node.name for node, _ in lost)
        raise TrainingError(f"lost {names} and could not replace it: {exc.message}; the checkpoints are kept",
                            hint=f"when capacity returns: xeoncluster up --name {ctx.config.name} && "
                                 f"xeoncluster train ... --name {ctx.config.name} --run {run} --resume",
                            log=ctx.reporter.log_path) from exc


def interrupted_error(cluster: str, run: str, nodes: list[Node], log: Path) -> TrainingError:
    """A run that stopped on a notice and was not recovered (--max-restarts spent or 0)."""
    text = log.read_text()
    by_address = {n.private_ip: n.name for n in nodes}
    noticed = sorted({by_address.get(addr, addr) for _, addr in NOTICE.findall(text)})
    stopped = re.findall(r"training: stopped at step (\d+)", text)
    at = f" at step {stopped[-1]} (checkpoint saved)" if stopped else ""
    what = ", ".join(f"{name}: spot interruption notice" for name in noticed) or "a stop request"
    error = TrainingError(f"training stopped{at}: {what}; not recovered (--max-restarts spent)", log=log,
                          hint=f"xeoncluster up --name {cluster} replaces lost nodes; then xeoncluster train ... "
                               f"--name {cluster} --run {run} --resume")
    error.exit_code = 1
    return error
