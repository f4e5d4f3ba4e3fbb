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
from xeoncluster.agent.failure import failure_line
from xeoncluster.agent.final_metrics import write_final_metrics
from xeoncluster.agent.node_watch import NodeWatch
from xeoncluster.agent.proactive import Replacement
from xeoncluster.agent.restart import Recovery
from xeoncluster.agent.run_storage import RunStorage
from xeoncluster.context import CommandContext
from xeoncluster.errors import XeonClusterError
from xeoncluster.node.events import EXIT_STOPPED, RunEvent
from xeoncluster.operations.train_prepare import Preparer
from xeoncluster.providers.base import Node
from xeoncluster.remote import NodeShell
from xeoncluster.remote_command import remote_command
from xeoncluster.remote_layout import RemoteLayout
from xeoncluster.runs.record import Restart, RunFiles, RunRecord, RunState
from xeoncluster.runs.submission import Submission
from xeoncluster.stacks import Stack, get_stack
from xeoncluster.train_plan import ENV_FILE, LaunchPlan

CANCEL_POLL_SECONDS = 1.0
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
        self.update(state=RunState.STARTING, agent_pid=os.getpid(), started_at=time.time(), storage=self.storage.where)
        self._price_nodes()
        threading.Thread(target=self._watch_cancel, name="xc-cancel-watch", daemon=True).start()
        shell = self.ctx.shell()
        try:
            self.storage.start(shell, self.plan)
            return self._loop(shell)
        except XeonClusterError as exc:
            return self.finish(RunState.FAILED, exc.exit_code or 1, exc.one_line())
        except Exception as exc:  # noqa: BLE001 - the agent's own failure still ends the record, in one line
            return self.finish(RunState.FAILED, 1, f"the run agent failed: {type(exc).__name__}: {exc}")
        finally:
            shell.close()
            self.control.close()

    def _loop(self, shell: NodeShell) -> int:
        plan = self.plan
        while True:
            outcome = self._attempt(shell, plan)
            if outcome.exit_code == 0:
                return self.finish(RunState.SUCCEEDED, 0)
            if self.cancelled.is_set():
                return self.finish(RunState.CANCELLED, 130, "cancelled")
            restart = self._recover(shell, plan, outcome)
            if restart is None:
                return self.finish(RunState.FAILED, self._exit_code(outcome), self._failure(outcome))
            self.update(restarts=[*self.record.restarts, restart])
            self.note(restart.describe())
            plan = self._resume_plan(shell, plan)

    def _attempt(self, shell: NodeShell, plan: LaunchPlan) -> Outcome:
        self.files.launch.write_text(json.dumps(plan.to_dict(), indent=2))
        self.attempt = Attempt(self.ctx, plan, self.files, self._on_event)
        self.update(state=RunState.RUNNING, nodes=[n.name for n in plan.nodes])
        left = len(self.record.restarts) < self.request.max_restarts
        names = [n.name for n in plan.nodes] if left else []
        with NodeWatch(self.ctx, names, self._on_gone):
            return self.attempt.run(shell)

    # -- events and watches -------------------------------------------------------------------
    def _on_event(self, event: RunEvent) -> None:
        self.storage.on_event(event)
        if event.kind == "checkpoint":
            self.update(durable_step=self.storage.durable_step)
        if event.kind in ("started", "step") and event.step is not None:
            self.update(step=event.step, total_steps=event.total or self.record.total_steps)
        elif event.kind == "notice":
            self._on_notice(event)

    def _on_notice(self, event: RunEvent) -> None:
        self.noticed[event.node] = event
        self.update(notices=sorted({*self.record.notices, event.node}))
        self.note(f"rank {event.rank} on {event.node}: {event.reason}")
        node = next((n for n in self.plan.nodes if n.private_ip == event.node), None)
        left = len(self.record.restarts) < self.request.max_restarts
        if node is None or node.role == "master" or not left or event.node in self.replacements:
            return  # the master's notice ends the agent too: the ranks stop at its deadline, checkpointed
        cluster = self.ctx.state.load()
        if cluster is None or not cluster.ready:
            return
        replacement = Replacement(self.ctx, cluster, node, self._warm, self._replacement_ready)
        self.replacements[event.node] = replacement.start()

    def _warm(self, node: Node) -> None:
        shell = self.ctx.shell()
        try:
            Preparer(self.ctx, self.request, self._stack(), [node]).warm(shell, node)
        finally:
            shell.close()

    def _replacement_ready(self, node: Node) -> None:
        if self.attempt is not None:
            self.note(f"{node.name} is ready to replace the noticed node; asking the ranks to stop at the next step")
            self.attempt.ask_to_stop(self.control)

    def _on_gone(self, gone: list[str]) -> None:
        self.note(f"{', '.join(gone)} is gone (no longer listed by the provider); stopping the job")
        if self.attempt is not None:
            self.attempt.interrupt(self.control, master_gone=self.plan.nodes[0].name in gone)

    def _watch_cancel(self) -> None:
        while not self.record.state.finished:
            if self.files.cancel.exists() and not self.cancelled.is_set():
                self.cancelled.set()
                self._cancel()
            time.sleep(CANCEL_POLL_SECONDS)

    def _cancel(self) -> None:
        self.note("cancel requested: the ranks save a checkpoint and stop")
        attempt = self.attempt
        if attempt is None:
            return
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
        self.verdict = recovery.verdict
        self.noticed, self.replacements = {}, {}
        if restart is not None:
            self._price_nodes()
        return restart

    def _resume_plan(self, shell: NodeShell, plan: LaunchPlan) -> LaunchPlan:
        cluster = self.ctx.require_up()
        self.request = replace(self.request, run=plan.run, resume=True)
        preparer = Preparer(self.ctx, self.request, self._stack(), cluster.node_list())
        resumed = preparer.prepare(shell, plan.run)
        preparer.send_env_file(shell, plan.run)
        self.plan = resumed
        return resumed

    def _stack(self) -> Stack:
        return get_stack(self.ctx.config.stack)

    def _price_nodes(self) -> None:
        try:
            nodes = self.ctx.provider.nodes(self.ctx.config)
        except XeonClusterError:
            return  # prices are estimates: a failed question keeps the last answer
        self.update(usd_per_hour=sum(n.price_per_hour or 0.0 for n in nodes))

    # -- failure ------------------------------------------------------------------------------
    def _failure(self, outcome: Outcome) -> str:
        if self.verdict:
            kept = f"; checkpoints are kept in {self.storage.where}" if self.storage.where else ""
            back = f"`up` brings the cluster back, then `train ... --run {self.record.run} --resume`"
            return f"{self.verdict}{kept}; {back}"
        failed = outcome.last("failed")
        if failed is not None:
            node = next((n.name for n in self.plan.nodes if n.private_ip == failed.node), failed.node)
            lines = " | ".join(failed.lines[-3:]) if failed.lines and failed.lines[-1] != failed.reason else ""
            return f"rank {failed.rank} on {node} failed: {failed.reason}" + (f" ({lines})" if lines else "")
        if outcome.exit_code < 0:
            return f"lost connection to {self.plan.nodes[0].name} (master): {outcome.detail}"
        if outcome.exit_code == EXIT_STOPPED:
            stopped = outcome.last("stopped")
            at = f" at step {stopped.step}" if stopped and stopped.step is not None else ""
            return f"training stopped{at} (checkpoint saved) and was not recovered (--max-restarts spent)"
        return failure_line(self.files.log.read_text(errors="replace"), outcome.exit_code)

    @staticmethod
    def _exit_code(outcome: Outcome) -> int:
        return outcome.exit_code if 0 < outcome.exit_code < 128 and outcome.exit_code != EXIT_STOPPED else 1


def _as_seen_here(ctx: CommandContext, plan: LaunchPlan) -> LaunchPlan:
    """The plan `train` made names nodes as the user's machine reaches them; the agent reaches them as
    its own state says (on a master: over their private addresses)."""
    cluster = ctx.state.load()
    here = {n.name: n for n in cluster.node_list()} if cluster is not None else {}
    return replace(plan, nodes=tuple(here.get(n.name, n) for n in plan.nodes))
