"""A run whose step stopped advancing, with every node still there: most often a rank stuck in an
all-reduce. The agent keeps every rank's Python stacks (SIGUSR1: xeoncluster/node/diagnostics/thread_dumps.py) in the
run's folder, then ends the job; the run restarts from its newest checkpoint on the same nodes,
counted as a failure within --max-restarts (node losses count apart, within --max-interruptions).
"""
from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from xeoncluster.agent.attempt import Attempt
from xeoncluster.agent.recovery import last_step, restore_checkpoint
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.node.diagnostics.thread_dumps import STACKS_DIR
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.record import IN_PLACE, Restart, RestartKind, RunFiles
from xeoncluster.wire.layout import RemoteLayout

DUMP_WAIT_SECONDS = 3.0
STACK_FILE = re.compile(r"rank-\d{1,6}\.txt")
SEPARATOR = "\x1e"


def ranks_pattern(run_dir: str) -> str:
    """What `pkill -f` matches on every node: this run's ranks (a task's or a script's) and nothing else;
    not mpiexec or the shell that started it, whose command lines hold the ranks' (SIGUSR1 ends them)."""
    return f"^[^ ]*/python[0-9.]* -m xeoncluster\\.node[. ].* --output-dir {ere_literal(run_dir)}( |$)"


def ere_literal(text: str) -> str:
    """`text` matched literally by a POSIX extended regex (pkill's)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def save_stacks(shell: NodeShell, plan: LaunchPlan, files: RunFiles) -> list[Path]:
    """Every rank writes its stacks; then they are copied into the run's folder here as NODE-rank-N.txt."""
    run_dir = RemoteLayout(plan.home).run_dir(plan.run)
    nodes = list(plan.nodes)
    shell.run(nodes, f"pkill -USR1 -f -- {shlex.quote(ranks_pattern(run_dir))} || true")
    time.sleep(DUMP_WAIT_SECONDS)
    folder = shlex.quote(f"{run_dir}/{STACKS_DIR}")
    listing = (f"cd {folder} 2>/dev/null || exit 0; for f in rank-*.txt; do [ -f \"$f\" ] && "
               f"printf '%s\\n' \"$f\" && tail -c 65536 \"$f\" && printf '\\036'; done; true")
    saved = []
    files.stacks.mkdir(exist_ok=True)
    for name, result in shell.run(nodes, listing).items():
        for chunk in result.stdout.split(SEPARATOR):
            file_name, _, text = chunk.lstrip("\n").partition("\n")
            if STACK_FILE.fullmatch(file_name) and text:
                target = files.stacks / f"{name}-{file_name}"
                target.write_text(text)
                saved.append(target)
    return saved


def stop_stalled(shell: NodeShell, attempt: Attempt, files: RunFiles, note: Callable[[str], None]) -> None:
    """Keep every rank's stacks, then end the job (over `shell`, which this closes)."""
    try:
        saved = save_stacks(shell, attempt.plan, files)
        note(f"stacks of {len(saved)} rank(s) in {files.stacks}")
        attempt.interrupt(shell)
        end_ranks(shell, attempt.plan)
    except XeonClusterError as exc:
        note(f"could not stop the stalled job cleanly: {exc.one_line()}")
    finally:
        shell.close()


def end_ranks(shell: NodeShell, plan: LaunchPlan) -> None:
    """After mpiexec was interrupted: a rank that does not take signals (stopped, or stuck in the kernel)
    is still there; SIGKILL ends it even when stopped."""
    pattern = ranks_pattern(RemoteLayout(plan.home).run_dir(plan.run))
    shell.run(list(plan.nodes), f"pkill -KILL -f -- {shlex.quote(pattern)} || true")


def restart_in_place(ctx: CommandContext, shell: NodeShell, plan: LaunchPlan, reported_step: int,
                     why: str) -> Restart:
    """Every node gets the newest checkpoint any of them holds; nothing is replaced."""
    started = time.monotonic()
    nodes = list(plan.nodes)
    layout = RemoteLayout(plan.home)
    last = last_step(shell, nodes[0], layout, plan.run, reported_step)
    try:
        step = restore_checkpoint(ctx, shell, nodes, layout.run_dir(plan.run))
    except XeonClusterError as exc:
        ctx.reporter.warn(f"could not give every node the newest checkpoint ({exc.one_line()}); resuming anyway")
        step = None
    return Restart(node=IN_PLACE, reason=why, from_step=step, seconds=time.monotonic() - started,
                   lost_steps=max(0, last - (step or 0)), replacement="", kind=RestartKind.FAILURE)
