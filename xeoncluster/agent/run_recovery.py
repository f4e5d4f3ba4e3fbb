"""The run agent's side of a recovery: after a launch ended without success, whether and how the run goes
on (agent/restart.py does the recovery itself), its relaunch prepared on the nodes the cluster has now,
and the one line that says why a run that cannot go on failed."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

from xeoncluster.agent.attempt import Outcome
from xeoncluster.agent.current_run import CurrentRun
from xeoncluster.agent.failure import outcome_line
from xeoncluster.agent.restart import Recovery
from xeoncluster.agent.shrink import ShrinkRule, rejoin
from xeoncluster.agent.stall import restart_in_place
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.operations.train_prepare import Preparer
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.record import Growth, Restart
from xeoncluster.wire.layout import RemoteLayout


def recover(run: CurrentRun, shell: NodeShell, plan: LaunchPlan, outcome: Outcome) -> Restart | None:
    """A lost node is an interruption (within --max-interruptions); a stall with every node there is the
    job's own failure (within --max-restarts)."""
    run.keeper.recovering()
    rule = ShrinkRule(run.request.min_nodes, run.request.train_while_replacing)
    recovery = Recovery(run.ctx, shell, plan, run.record.step, run.noticed, run.replacements, rule, run.cancelled.wait)
    restart = recovery.run(outcome, spent=interruptions_spent(run))
    if restart is None and run.stalled and not recovery.verdict and run.failure_restarts_left():
        restart = restart_in_place(run.ctx, shell, plan, run.record.step, f"stalled: {run.stalled}")
        run.keeper.stalled()
    run.verdict = recovery.verdict
    run.removals = recovery.removals
    run.noticed, run.replacements = {}, {}
    if restart is not None:  # prices are estimates: asked beside the relaunch, not before it
        threading.Thread(target=price_nodes, args=(run,), name="xc-price-nodes", daemon=True).start()
    return restart


def interruptions_spent(run: CurrentRun) -> str:
    """Why a lost node is not replaced, when --max-interruptions says so; "" while it may be."""
    if run.interruptions_left():
        return ""
    return f"--max-interruptions {run.request.max_interruptions} spent"


def prepare_again(run: CurrentRun, shell: NodeShell, plan: LaunchPlan, after_restart: bool = True) -> LaunchPlan:
    """The launch on the nodes the cluster has now (a replacement gets what it lacks), its global batch
    the one the run started with; its time goes on the restart record (`after_restart`)."""
    preparing = time.monotonic()
    cluster = run.ctx.require_up()
    run.request = replace(run.request, run=plan.run, batch_world=run.record.batch_world)
    preparer = Preparer(run.ctx, run.request, run.stack(), cluster.node_list())
    resumed = preparer.prepare(shell, plan.run)
    preparer.send_env_file(shell, plan.run)
    run.plan = resumed
    if run.record.restarts and after_restart:  # else a queued run's first launch, or a growth
        run.keeper.prepared(round(time.monotonic() - preparing, 3))
    return resumed


def grow(run: CurrentRun, shell: NodeShell, plan: LaunchPlan) -> None:
    """The ranks stopped with a checkpoint for the nodes a shrunk run got back (agent/regrowth.py): the
    master's files name every node, and each gets the checkpoint."""
    started, began_at = time.monotonic(), time.time()
    growth, run.growth = run.growth, None
    cluster = run.ctx.require_up()
    step = rejoin(run.ctx, cluster, shell, RemoteLayout(plan.home).run_dir(plan.run),
                  f"grow the run back to {len(cluster.nodes)} node(s)")
    joined = ", ".join(n.name for n in growth.new) if growth else ""
    change = Growth(nodes=joined, to_nodes=len(cluster.nodes), from_step=step, seconds=time.monotonic() - started,
                    began_at=began_at)
    run.keeper.grew(change)
    run.note(change.describe())


def failure(run: CurrentRun, outcome: Outcome) -> str:
    if run.verdict:
        kept = f"; checkpoints are kept in {run.storage.where}" if run.storage.where else ""
        back = f"`up` brings the cluster back, then `train ... --run {run.record.run} --resume`"
        return f"{run.verdict}{kept}; {back}"
    if run.stalled:
        return f"the run stalled ({run.stalled}) and was not restarted (--max-restarts spent); stacks in " \
               f"{run.files.stacks}"
    return outcome_line(outcome, list(run.plan.nodes), run.files.log)


def price_nodes(run: CurrentRun) -> None:
    try:
        nodes = run.ctx.provider.nodes(run.ctx.config)
    except XeonClusterError:
        return  # prices are estimates: a failed question keeps the last answer
    run.keeper.priced(sum(n.price_per_hour or 0.0 for n in nodes))
