"""The run agent's loop: launch the job, watch it, recover it when it loses a node, and keep the
run's record true from start to end. It needs no CLI: the laptop may come and go.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import replace

from xeoncluster.agent.attempt import Attempt, Outcome
from xeoncluster.agent.failure import failed_exit_code, outcome_line
from xeoncluster.agent.final_metrics import write_final_metrics
from xeoncluster.agent.node_watch import NodeWatch
from xeoncluster.agent.pace import Pace
from xeoncluster.agent.proactive import Replacement
from xeoncluster.agent.queue import Queue
from xeoncluster.agent.restart import Recovery
from xeoncluster.agent.run_storage import RunStorage
from xeoncluster.agent.stall import restart_in_place, stop_stalled
from xeoncluster.agent.usage_watch import UsageScalars, UsageWatch
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.core.stacks import Stack, get_stack
from xeoncluster.job.train_plan import ENV_FILE, LaunchPlan
from xeoncluster.job.train_request import ScriptRequest
from xeoncluster.node.diagnostics.startup_clock import describe as describe_startup
from xeoncluster.node.events.events import RunEvent
from xeoncluster.operations.train_prepare import Preparer
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import remote_command
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.queue_order import place_line
from xeoncluster.runs.record import Live, NodeUse, Restart, RunFiles, RunRecord, RunState
from xeoncluster.runs.submission import Submission
from xeoncluster.wire.layout import RemoteLayout

CANCEL_POLL_SECONDS = 1.0
QUEUE_POLL_SECONDS = 1.0
# How long the ranks get to checkpoint and stop after a cancel before mpiexec is interrupted.
CANCEL_GRACE_SECONDS = 120.0


class Supervisor:
    def __init__(self, ctx: CommandContext, files: RunFiles, submission: Submission) -> None:
        self.ctx, self.files = ctx, files
        self.request, self.plan = submission.request, _as_seen_here(ctx, submission.plan)
        record = files.load()
        if record is None:
            raise XeonClusterError(f"no run record in {files.folder}")
        self.record: RunRecord = record
        self.control = ctx.shell()  # commands while the streaming connection is busy
        self.attempt: Attempt | None = None
        self.noticed: dict[str, RunEvent] = {}
        self.replacements: dict[str, Replacement] = {}
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._cost_clock = time.time()
        self.storage = RunStorage(ctx, files, submission, self._storage_note)
        self.verdict = ""
        self.pace = Pace()
        self.stalled = ""  # why the current launch was stopped as stalled, once it was

    # -- the record ---------------------------------------------------------------------------
    def update(self, **changes: object) -> None:
        with self._lock:
            now = time.time()
            self.record.cost_usd += self.record.usd_per_hour * (now - self._cost_clock) / 3600
            self._cost_clock = now
            for key, value in changes.items():
                setattr(self.record, key, value)
            self.files.save(self.record)

    def note(self, text: str) -> None:
        """What the agent did, in the run's log too: whoever follows the run sees it where the ranks' lines are."""
        self.ctx.reporter.warn(text)
        with open(self.files.log, "a") as log:
            log.write(f"agent: {text}\n")

    def finish(self, state: RunState, exit_code: int, error: str = "") -> int:
        self._forget_env()  # before the record says the run ended: whoever reads that finds the values gone
        self.update(ended_at=time.time())  # the cost up to the end, which metrics.json carries
        if state is RunState.SUCCEEDED:
            self._final_metrics()  # before too: `train` fetches metrics.json once the record says succeeded
        # Stored before the record says the run ended: a `down` right after an attached `train` returns
        # (it is refused only while a run is active) must not take the master while results upload.
        if self.storage.where:
            self.note(f"storing the run's {'results and ' if state is RunState.SUCCEEDED else ''}log in "
                      f"{self.storage.where}")
        stored = self.storage.finish(state)
        self.update(state=state, exit_code=exit_code, error=error, durable_step=self.storage.durable_step)
        if not stored:
            self.note(f"not everything of run {self.record.run} reached {self.storage.where}; see the agent's log")
        self.storage.final_record()
        self.ctx.reporter.info(f"run {self.record.run}: {state.value}" + (f": {error}" if error else ""))
        return exit_code

    def _forget_env(self) -> None:
        """--env values live as long as their run, in any state it ends: the agent's copy (which resumed
        launches were written from) and every node's."""
        self.files.env.unlink(missing_ok=True)
        if not self.request.env:
            return
        command = remote_command("rm", "-f", f"{RemoteLayout(self.plan.home).run_dir(self.plan.run)}/{ENV_FILE}")
        for node in self.plan.nodes:  # one at a time: a node that is gone must not spare the others
            with contextlib.suppress(XeonClusterError):
                self.control.run([node], command)

    def _final_metrics(self) -> None:
        """metrics.json with the restarts, lost steps and cost, on the master, where the results are
        stored and fetched from: every copy of it is this one."""
        run_dir = RemoteLayout(self.plan.home).run_dir(self.plan.run)
        try:
            write_final_metrics(self.control, self.plan.nodes[0], run_dir, self.record)
        except XeonClusterError as exc:
            self.note(f"metrics.json keeps what the ranks wrote, without the restarts and cost: {exc.one_line()}")

    def _storage_note(self, text: str) -> None:
        self.update(storage_error=text)
        self.note(text)

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        threading.Thread(target=self._watch_cancel, name="xc-cancel-watch", daemon=True).start()
        waited = self._wait_turn()
        if self.cancelled.is_set():
            return self._end_unstarted()
        self._price_nodes()
        shell = self.ctx.shell()
        try:
            if waited:  # nodes may have been replaced meanwhile: they get what the run needs now
                self.plan = self._prepare_again(shell, self.plan)
            self.storage.start(shell, self.plan)
            return self._loop(shell)
        except XeonClusterError as exc:
            return self.finish(RunState.FAILED, exc.exit_code or 1, exc.one_line())
        except Exception as exc:  # noqa: BLE001 - the agent's own failure still ends the record, in one line
            return self.finish(RunState.FAILED, 1, f"the run agent failed: {type(exc).__name__}: {exc}")
        finally:
            shell.close()
            self.control.close()

    # -- the queue ----------------------------------------------------------------------------
    def _wait_turn(self) -> bool:
        """Until every run before this one has ended (or a cancel came); whether it had to wait."""
        queue = Queue(self.files.folder.parent)
        said = ""
        while not self.cancelled.is_set():
            ahead = queue.take_turn(self.record.run, self._started)
            if not ahead:
                return bool(said)
            line = place_line(self.record.run, ahead)
            if line != said:
                self.update(state=RunState.QUEUED, agent_pid=os.getpid())
                if not said:
                    self.storage.queued_record()
                self.note(line)
                said = line
            time.sleep(QUEUE_POLL_SECONDS)
        return bool(said)

    def _started(self) -> None:
        self.update(state=RunState.STARTING, agent_pid=os.getpid(), started_at=time.time(), storage=self.storage.where)

    def _end_unstarted(self) -> int:
        self._forget_env()
        self.update(state=RunState.CANCELLED, exit_code=130, error="cancelled before it started", ended_at=time.time(),
                    agent_pid=os.getpid())
        self.note(f"run {self.record.run} cancelled before it started")
        return 130

    def _loop(self, shell: NodeShell) -> int:
        plan = self.plan
        while True:
            if self.cancelled.is_set():  # came while the launch was being prepared
                return self.finish(RunState.CANCELLED, 130, "cancelled")
            outcome = self._attempt(shell, plan)
            if outcome.exit_code == 0:
                return self.finish(RunState.SUCCEEDED, 0)
            if self.cancelled.is_set():
                return self.finish(RunState.CANCELLED, 130, "cancelled")
            restart = self._recover(shell, plan, outcome)
            if restart is None:
                return self.finish(RunState.FAILED, failed_exit_code(outcome), self._failure(outcome))
            self.update(restarts=[*self.record.restarts, restart])
            self.note(restart.describe())
            self.request = replace(self.request, resume=True)
            plan = self._prepare_again(shell, plan)

    def _attempt(self, shell: NodeShell, plan: LaunchPlan) -> Outcome:
        self.files.launch.write_text(json.dumps(plan.to_dict(), indent=2))
        self.attempt = Attempt(self.ctx, plan, self.files, self._on_event)
        self.pace, self.stalled = Pace(), ""
        self.update(state=RunState.RUNNING, nodes=[n.name for n in plan.nodes])
        left = len(self.record.restarts) < self.request.max_restarts
        watched = list(plan.nodes) if left else []
        usage = UsageWatch(self.ctx, list(plan.nodes), plan.home, self.files, self._on_usage, self._check_stall,
                           scalars=UsageScalars(self.files.tensorboard))
        with NodeWatch(self.ctx, watched, self._on_gone, self.note), usage:
            return self.attempt.run(shell)

    # -- events and watches -------------------------------------------------------------------
    def _on_event(self, event: RunEvent) -> None:
        self.storage.on_event(event)
        if event.kind == "checkpoint":
            self.update(durable_step=self.storage.durable_step)
        if event.kind == "eval":
            self.pace.evals = {k: v for k, v in event.metrics.items() if v is not None}
            if isinstance(self.request, ScriptRequest):  # the built-in tasks print their own eval lines
                scores = "  ".join(f"{k} {v:.4g}" for k, v in self.pace.evals.items())
                self.note(f"eval at step {event.step}: {scores}")
        if event.kind == "started" and self.record.restarts and (took := describe_startup(event.metrics)):
            self.note(f"relaunched: rank 0 was ready to train {took} after its process started")
        if event.kind in ("started", "step") and event.step is not None:
            if event.kind == "step":
                self.pace.step(event.time, event.step, event.loss)
            total = event.total or self.record.total_steps
            self.update(step=event.step, total_steps=total, live=self._live(event.step, total))
        elif event.kind == "notice":
            self._on_notice(event)

    def _on_notice(self, event: RunEvent) -> None:
        self.noticed[event.node] = event
        self.update(notices=sorted({*self.record.notices, event.node}))
        self.note(f"rank {event.rank} on {event.node}: {event.reason}")
        node = next((n for n in self.plan.nodes if n.private_ip == event.node), None)
        left = len(self.record.restarts) < self.request.max_restarts
        if node is None or node.is_master or not left or event.node in self.replacements:
            return  # the master's notice ends the agent too: the ranks stop at its deadline, checkpointed
        cluster = self.ctx.state.load()
        if cluster is None or not cluster.ready:
            return
        replacement = Replacement(self.ctx, cluster, node, self._warm, self._replacement_ready)
        self.replacements[event.node] = replacement.start()

    def _warm(self, node: Node) -> None:
        # Once the job has stopped (a notice shorter than a boot), the resumed rank builds its data itself.
        data_too = self.record.state is RunState.RUNNING
        with contextlib.closing(self.ctx.shell()) as shell:
            Preparer(self.ctx, self.request, self._stack(), [node]).warm(shell, node, self.plan.home, self.plan.run,
                                                                        data_too)

    def _replacement_ready(self, node: Node) -> None:
        if self.attempt is not None:
            self.note(f"{node.name} is ready to replace the noticed node; asking the ranks to stop at the next step")
            self.attempt.ask_to_stop(self.control)

    def _live(self, step: int, total: int | None) -> Live:
        return self.pace.live(step, total, self.record.cost_usd, self.record.usd_per_hour)

    def _on_usage(self, usage: dict[str, NodeUse]) -> None:
        self.update(usage=usage, live=self._live(self.record.step, self.record.total_steps))

    def _check_stall(self) -> None:
        quiet = self.pace.stalled(time.time(), self.request.stall_minutes * 60)
        attempt = self.attempt
        if quiet is None or self.stalled or attempt is None or self.cancelled.is_set():
            return
        self.stalled = f"no step for {quiet:.0f}s after step {self.record.step} (the median step took " \
                       f"{self.pace.step_seconds() or 0:.2f}s)"
        self.note(f"the run stalled: {self.stalled}; saving every rank's stacks, then restarting from the newest "
                  "checkpoint")
        stop_stalled(self.ctx.shell(), attempt, self.files, self.note)

    def _on_gone(self, gone: list[str]) -> None:
        self.note(f"{', '.join(gone)} is gone (unlisted by the provider, silent over SSH); stopping the job")
        if self.attempt is not None:
            self.attempt.interrupt(self.control, master_gone=self.plan.nodes[0].name in gone)

    def _watch_cancel(self) -> None:
        while not self.record.state.finished:
            if self.files.cancel.exists() and not self.cancelled.is_set():
                self.cancelled.set()
                self._cancel()
            time.sleep(CANCEL_POLL_SECONDS)

    def _cancel(self) -> None:
        attempt = self.attempt
        if attempt is None:  # still queued, or preparing: it ends before it launches
            self.note("cancel requested before the run started")
            return
        self.note("cancel requested: the ranks save a checkpoint and stop")
        with contextlib.suppress(XeonClusterError):  # the job may have ended already
            attempt.ask_to_stop(self.control)
        deadline = time.monotonic() + CANCEL_GRACE_SECONDS
        while not self.record.state.finished and time.monotonic() < deadline and self.attempt is attempt:
            time.sleep(CANCEL_POLL_SECONDS)
        if not self.record.state.finished and self.attempt is attempt:
            attempt.interrupt(self.control)

    # -- recovery -----------------------------------------------------------------------------
    def _recover(self, shell: NodeShell, plan: LaunchPlan, outcome: Outcome) -> Restart | None:
        if len(self.record.restarts) >= self.request.max_restarts:
            return None
        self.update(state=RunState.RECOVERING)
        recovery = Recovery(self.ctx, shell, plan, self.record.step, self.noticed, self.replacements)
        restart = recovery.run(outcome)
        if restart is None and self.stalled and not recovery.verdict:
            restart = restart_in_place(self.ctx, shell, plan, self.record.step, f"stalled: {self.stalled}")
            self.update(stalls=self.record.stalls + 1)
        self.verdict = recovery.verdict
        self.noticed, self.replacements = {}, {}
        if restart is not None:  # prices are estimates: asked beside the relaunch, not before it
            threading.Thread(target=self._price_nodes, name="xc-price-nodes", daemon=True).start()
        return restart

    def _prepare_again(self, shell: NodeShell, plan: LaunchPlan) -> LaunchPlan:
        """The launch on the nodes the cluster has now (a replacement gets what it lacks); its time goes
        on the restart record."""
        preparing = time.monotonic()
        cluster = self.ctx.require_up()
        self.request = replace(self.request, run=plan.run)
        preparer = Preparer(self.ctx, self.request, self._stack(), cluster.node_list())
        resumed = preparer.prepare(shell, plan.run)
        preparer.send_env_file(shell, plan.run)
        self.plan = resumed
        if self.record.restarts:  # else this is a queued run's first launch, prepared when its turn came
            *earlier, last = self.record.restarts
            seconds = round(time.monotonic() - preparing, 3)
            self.update(restarts=[*earlier, last.model_copy(update={"prepare_seconds": seconds})])
        return resumed

    def _failure(self, outcome: Outcome) -> str:
        if self.verdict:
            kept = f"; checkpoints are kept in {self.storage.where}" if self.storage.where else ""
            back = f"`up` brings the cluster back, then `train ... --run {self.record.run} --resume`"
            return f"{self.verdict}{kept}; {back}"
        if self.stalled:
            return f"the run stalled ({self.stalled}) and was not restarted (--max-restarts spent); stacks in " \
                   f"{self.files.stacks}"
        return outcome_line(outcome, list(self.plan.nodes), self.files.log)

    def _stack(self) -> Stack:
        return get_stack(self.ctx.config.stack)

    def _price_nodes(self) -> None:
        try:
            nodes = self.ctx.provider.nodes(self.ctx.config)
        except XeonClusterError:
            return  # prices are estimates: a failed question keeps the last answer
        self.update(usd_per_hour=sum(n.price_per_hour or 0.0 for n in nodes))

def _as_seen_here(ctx: CommandContext, plan: LaunchPlan) -> LaunchPlan:
    """The plan `train` made names nodes as the user's machine reaches them; the agent reaches them as
    its own state says (on a master: over their private addresses)."""
    cluster = ctx.state.load()
    here = {n.name: n for n in cluster.node_list()} if cluster is not None else {}
    return replace(plan, nodes=tuple(here.get(n.name, n) for n in plan.nodes))
