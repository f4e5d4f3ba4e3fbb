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
from xeoncluster.agent.stall import restart_in_place
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.operations.train_prepare import Preparer
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.record import Restart


def recover(run: CurrentRun, shell: NodeShell, plan: LaunchPlan, outcome: Outcome) -> Restart | None:
    """A lost node is an interruption (within --max-interruptions); a stall with every node there is the
    job's own failure (within --max-restarts)."""
    run.keeper.recovering()
    recovery = Recovery(run.ctx, shell, plan, run.record.step, run.noticed, run.replacements)
    restart = recovery.run(outcome, spent=interruptions_spent(run))
    if restart is None and run.stalled and not recovery.verdict and run.failure_restarts_left():
        restart = restart_in_place(run.ctx, shell, plan, run.record.step, f"stalled: {run.stalled}")
        run.keeper.stalled()
    run.verdict = recovery.verdict
    run.noticed, run.replacements = {}, {}
    if restart is not None:  # prices are estimates: asked beside the relaunch, not before it
        threading.Thread(target=price_nodes, args=(run,), name="xc-price-nodes", daemon=True).start()
    return restart


def interruptions_spent(run: CurrentRun) -> str:
    """Why a lost node is not replaced, when --max-interruptions says so; "" while it may be."""
    if run.interruptions_left():
        return ""
    return f"--max-interruptions {run.request.max_interruptions} spent"


def prepare_again(run: CurrentRun, shell: NodeShell, plan: LaunchPlan) -> LaunchPlan:
    """The launch on the nodes the cluster has now (a replacement gets what it lacks); its time goes
    on the restart record."""
    preparing = time.monotonic()
    cluster = run.ctx.require_up()
    run.request = replace(run.request, run=plan.run)
    preparer = Preparer(run.ctx, run.request, run.stack(), cluster.node_list())
    resumed = preparer.prepare(shell, plan.run)
    preparer.send_env_file(shell, plan.run)
    run.plan = resumed
    if run.record.restarts:  # else this is a queued run's first launch, prepared when its turn came
        run.keeper.prepared(round(time.monotonic() - preparing, 3))
    return resumed


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
