"""The run agent's loop: launch the job, watch it, recover it when it loses a node, and keep the
run's record true from start to end. It needs no CLI: the laptop may come and go.

This module holds one run's lifecycle (its attempts and its end); its turn in the queue is
agent/run_turn.py, what it watches while a launch runs agent/run_watches.py, what follows a launch
that ended without success agent/run_recovery.py, and its record's changes agent/record_keeper.py.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import replace

from xeoncluster.agent.attempt import Attempt, Outcome
from xeoncluster.agent.cost_ceiling import stopped_line
from xeoncluster.agent.current_run import CurrentRun
from xeoncluster.agent.failure import failed_exit_code
from xeoncluster.agent.final_metrics import write_final_metrics
from xeoncluster.agent.handover import HOLDER, hand_over
from xeoncluster.agent.node_watch import NodeWatch
from xeoncluster.agent.pace import Pace
from xeoncluster.agent.prestart import Ahead
from xeoncluster.agent.queue import Queue
from xeoncluster.agent.record_keeper import RecordKeeper
from xeoncluster.agent.regrowth import Regrowth, size_of
from xeoncluster.agent.replica import Replica
from xeoncluster.agent.run_recovery import failure, grow, prepare_again, price_nodes, recover
from xeoncluster.agent.run_storage import RunStorage
from xeoncluster.agent.run_turn import wait_turn
from xeoncluster.agent.run_watches import RunWatches
from xeoncluster.agent.usage_watch import UsageScalars, UsageWatch
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.job.train_plan import ENV_FILE, LaunchPlan
from xeoncluster.node.events.events import StoppedEvent
from xeoncluster.providers.abilities import AgentOnMaster
from xeoncluster.providers.registry import spec_for
from xeoncluster.remote.command import remote_command
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.record import RunFiles, RunRecord, RunState
from xeoncluster.runs.submission import Submission
from xeoncluster.wire.layout import RemoteLayout


class Supervisor:
    def __init__(self, ctx: CommandContext, files: RunFiles, submission: Submission) -> None:
        self.run_now = CurrentRun.open(ctx, files, submission)
        self.relaunch = submission.relaunch
        self.watches = RunWatches(self.run_now)
        self.released: Ahead | None = None  # a job started ahead, released: the next attempt follows it

    @property
    def record(self) -> RunRecord:
        return self.run_now.record

    @property
    def keeper(self) -> RecordKeeper:
        return self.run_now.keeper

    @property
    def storage(self) -> RunStorage:
        return self.run_now.storage

    @property
    def plan(self) -> LaunchPlan:
        return self.run_now.plan

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        run = self.run_now
        threading.Thread(target=self.watches.watch_cancel, name="xc-cancel-watch", daemon=True).start()
        waited = wait_turn(run)
        if run.cancelled.is_set():
            return self._end_unstarted()
        price_nodes(run)
        shell = run.ctx.shell()
        try:
            if waited or self.relaunch:  # nodes may have been replaced meanwhile: they get what the run needs now
                run.plan = prepare_again(run, shell, run.plan)
            run.storage.start(shell, run.plan)
            self._share(shell)
            return self._loop(shell)
        except XeonClusterError as exc:
            return self.finish(RunState.FAILED, exc.exit_code or 1, exc.one_line())
        except Exception as exc:  # noqa: BLE001 - the agent's own failure still ends the record, in one line
            return self.finish(RunState.FAILED, 1, f"the run agent failed: {type(exc).__name__}: {exc}")
        finally:
            shell.close()
            run.control.close()

    def _share(self, shell: NodeShell) -> None:
        """The run's files on the workers now, not at the next heartbeat: a master lost in the run's first
        minute must not take the run with it (agent/replica.py)."""
        run = self.run_now
        if spec_for(run.ctx.config.provider).poweroff is None or not isinstance(run.ctx.provider, AgentOnMaster):
            return
        try:
            Replica(shell, run.ctx.state).copy([n for n in run.plan.nodes if not n.is_master])
        except XeonClusterError as exc:
            run.note(f"the run's files did not reach the workers ({exc.one_line()}); the next heartbeat copies them")

    def _loop(self, shell: NodeShell) -> int:
        run = self.run_now
        plan = run.plan
        while True:
            if run.cancelled.is_set():  # came while the launch was being prepared
                return self._cancelled()
            outcome = self._attempt(shell, plan)
            if outcome.exit_code == 0:
                return self.finish(RunState.SUCCEEDED, 0)
            if run.cancelled.is_set():
                return self._cancelled()
            if run.ahead is not None and run.handover is not None:
                run.ahead.drop(run.control)  # a job started ahead has no place under another master
                run.ahead = None
            if run.handover is not None and run.handover.ready and outcome.last(StoppedEvent) is not None:
                if self._hand_over():
                    return 0
                run.request = replace(run.request, resume=True)  # on the same nodes, to the notice's deadline
                plan = prepare_again(run, shell, plan)
                continue
            if run.growth is not None and run.growth.ready and outcome.last(StoppedEvent) is not None:
                grow(run, shell, plan)
                run.request = replace(run.request, resume=True)
                plan = self._released(after_restart=False) or prepare_again(run, shell, plan, after_restart=False)
                continue
            restart = recover(run, shell, plan, outcome)
            if run.growth is not None and run.growth.ready:  # the grown nodes joined through the recovery
                run.growth = None
            if restart is None:
                return self.finish(RunState.FAILED, failed_exit_code(outcome), failure(run, outcome))
            run.keeper.restarted(restart)
            run.note(restart.describe())
            run.request = replace(run.request, resume=True)
            plan = self._released() or prepare_again(run, shell, plan)

    def _released(self, after_restart: bool = True) -> LaunchPlan | None:
        """The job started ahead of the change (agent/prestart.py), released now that the checkpoint is on every
        node: its plan, which the next attempt follows; None when there is none or it no longer fits. Its time
        goes on the restart record (`after_restart`; a growth has none)."""
        run = self.run_now
        ahead, run.ahead = run.ahead, None
        if ahead is None:
            return None
        releasing = time.monotonic()
        cluster = run.ctx.state.load()
        try:
            if cluster is None or not ahead.fits(cluster.node_list()):
                raise XeonClusterError("the nodes changed since it started")
            ahead.release(run.control)
        except XeonClusterError as exc:
            run.note(f"the job started ahead is dropped ({exc.one_line()}); the run starts again instead")
            ahead.drop(run.control)
            return None
        self.released = ahead
        run.plan = ahead.plan
        if after_restart:
            run.keeper.prepared(round(time.monotonic() - releasing, 3))
        run.note(f"released the job started ahead on {', '.join(n.name for n in ahead.plan.nodes)}")
        return ahead.plan

    def _attempt(self, shell: NodeShell, plan: LaunchPlan) -> Outcome:
        run, watches = self.run_now, self.watches
        run.files.launch.write_text(json.dumps(plan.to_dict(), indent=2))
        ahead, self.released = self.released, None
        run.attempt = ahead.attempt if ahead is not None else Attempt(run.ctx, plan, run.files, watches.on_event)
        run.pace, run.stalled = Pace(), ""
        run.keeper.running([n.name for n in plan.nodes], plan.ranks.world_size, self._ask_for_missing(plan))
        watched = list(plan.nodes) if run.interruptions_left() else []
        usage = UsageWatch(run.ctx, list(plan.nodes), plan.home, run.files, watches.on_usage, watches.check_stall,
                           scalars=UsageScalars(run.files.tensorboard))
        with NodeWatch(run.ctx, watched, watches.on_gone, run.note), usage:
            return ahead.follow() if ahead is not None else run.attempt.run(shell)

    def _ask_for_missing(self, plan: LaunchPlan) -> int:
        """A run on fewer nodes than its cluster's size (a shrink) asks for the missing ones while it trains;
        the cluster's size."""
        run = self.run_now
        cluster = run.ctx.state.load()
        size = size_of(cluster) if cluster is not None else len(plan.nodes)
        # A cluster short of its size for another reason is `up`'s to repair: only a run that shrank grows back.
        shrunk = any(r.nodes_after is not None for r in run.record.restarts)
        if run.growth is None and shrunk and len(plan.nodes) < size and cluster is not None and cluster.ready:
            # A shrink while the lost nodes are replaced asks for them at once, not after the first wait.
            at_once = run.record.restarts[-1].replacing if run.record.restarts else False
            run.growth = Regrowth(run.ctx, self.watches.warm, self.watches.grown, at_once=at_once,
                                  after=tuple(run.removals)).start()
        return size

    def _hand_over(self) -> bool:
        """The run goes on under the successor's agent: this one ends it nowhere (its record is the new
        master's now), and the machine powers off. False when that failed: the run goes on here."""
        run = self.run_now
        handover, run.handover = run.handover, None
        assert handover is not None
        run.note(f"the ranks stopped at step {run.record.step}; handing the run to the new master")
        sync = run.storage.sync
        try:
            hand_over(run.ctx, handover, run.files, sync.close if sync else lambda _t: True, run.note)
        except XeonClusterError as exc:
            run.note(f"the handover failed ({exc.one_line()}); the run goes on here until the notice's deadline")
            Queue(run.files.path.parent).release(HOLDER)
            return False
        return True

    # -- the end ------------------------------------------------------------------------------
    def finish(self, state: RunState, exit_code: int, error: str = "") -> int:
        run = self.run_now
        if run.growth is not None:
            run.growth.stop()
        if run.ahead is not None:  # started for a swap that did not come (the run ended first)
            run.ahead.drop(run.control)
            run.ahead = None
        self._forget_env()  # before the record says the run ended: whoever reads that finds the values gone
        run.keeper.ending()  # the cost up to the end, which metrics.json carries
        if state is RunState.SUCCEEDED:
            self._final_metrics()  # before too: `train` fetches metrics.json once the record says succeeded
        # Stored before the record says the run ended: a `down` right after an attached `train` returns
        # (it is refused only while a run is active) must not take the master while results upload.
        if run.storage.where:
            run.note(f"storing the run's {'results and ' if state is RunState.SUCCEEDED else ''}log in "
                     f"{run.storage.where}")
        stored = run.storage.finish(state)
        run.keeper.ended(state, exit_code, error, run.storage.durable_step)
        if not stored:
            run.note(f"not everything of run {run.record.run} reached {run.storage.where}; see the agent's log")
        run.storage.final_record()
        run.ctx.reporter.info(f"run {run.record.run}: {state.value}" + (f": {error}" if error else ""))
        return exit_code

    def _cancelled(self) -> int:
        run = self.run_now
        if not run.stopped:
            return self.finish(RunState.CANCELLED, 130, "cancelled")
        return self.finish(RunState.CANCELLED, 130, stopped_line(run.stopped, run.storage.where, run.record.command))

    def _end_unstarted(self) -> int:
        run = self.run_now
        self._forget_env()
        run.keeper.cancelled_unstarted()
        run.note(f"run {run.record.run} cancelled before it started")
        return 130

    def _forget_env(self) -> None:
        """--env values live as long as their run, in any state it ends: the agent's copy (which resumed
        launches were written from) and every node's."""
        run = self.run_now
        run.files.env.unlink(missing_ok=True)
        if not run.request.env:
            return
        command = remote_command("rm", "-f", f"{RemoteLayout(run.plan.home).run_dir(run.plan.run)}/{ENV_FILE}")
        for node in run.plan.nodes:  # one at a time: a node that is gone must not spare the others
            with contextlib.suppress(XeonClusterError):
                run.control.run([node], command)

    def _final_metrics(self) -> None:
        """metrics.json with the restarts, lost steps and cost, on the master, where the results are
        stored and fetched from: every copy of it is this one."""
        run = self.run_now
        run_dir = RemoteLayout(run.plan.home).run_dir(run.plan.run)
        try:
            write_final_metrics(run.control, run.plan.nodes[0], run_dir, run.record)
        except XeonClusterError as exc:
            run.note(f"metrics.json keeps what the ranks wrote, without the restarts and cost: {exc.one_line()}")
