"""A run's storage, the agent's one job of keeping what must outlive the nodes: bring a checkpoint back
before the first launch when the master lost it, copy every checkpoint when it is saved, the log and
events as they grow, and at the end the results and the final model.

RunStorage is what the supervisor calls; StorageSync is its uploader. Uploads run in a thread of the
agent, never in the ranks: training goes on while a checkpoint is copied, and a failed upload is
retried with backoff and reported, never fatal to the run. A checkpoint counts as durable only once its
MANIFEST.json (written last) is there; only the newest `keep` durable checkpoints are kept.
"""
from __future__ import annotations

import faulthandler
import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from xeoncluster.agent.checkpoint_source import CheckpointSource, OnMaster, OverSsh
from xeoncluster.agent.recovery import restore_checkpoint
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.job.train_request import ScriptRequest
from xeoncluster.node.events.events import RunEvent
from xeoncluster.node.events.trackers import TENSORBOARD_DIR
from xeoncluster.providers.abilities import AgentOnMaster
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.record import RunFiles, RunState
from xeoncluster.runs.stored_checkpoints import download_checkpoint, durable_steps
from xeoncluster.runs.submission import Submission
from xeoncluster.storage.base import MANIFEST, Storage
from xeoncluster.wire.layout import RemoteLayout
from xeoncluster.wire.run_outputs import TASK_RESULTS

LOG_EVERY_SECONDS = 30.0
# How long the agent waits, at the end of a run, for the results and the last checkpoint to be stored.
DRAIN_SECONDS = 900.0


class RunStorage:
    def __init__(self, ctx: CommandContext, files: RunFiles, submission: Submission,
                 report: Callable[[str], None]) -> None:
        self.ctx, self.files, self.submission, self.report = ctx, files, submission, report
        self.sync: StorageSync | None = None
        self._logged = 0.0
        self.source: CheckpointSource | None = None

    @property
    def where(self) -> str:
        location = self.submission.storage
        return location.where(self.ctx.config.name, self.submission.plan.run) if location else ""

    def start(self, shell: NodeShell, plan: LaunchPlan) -> None:
        location = self.submission.storage
        if location is None:
            return
        run_dir = RemoteLayout(plan.home).run_dir(plan.run)
        self.source = OnMaster(Path(run_dir)) if isinstance(self.ctx.provider, AgentOnMaster) else \
            OverSsh(shell, plan.nodes[0], run_dir)
        storage = self.ctx.provider.open_storage(location)
        self.sync = StorageSync(storage, self.ctx.config.name, plan.run, self.source,
                                self.submission.keep_checkpoints,
                                [self.files.record, self.files.log, self.files.events], self.report,
                                None if isinstance(self.submission.request, ScriptRequest) else TASK_RESULTS)
        if self.submission.restore_step is not None:
            self._restore(shell, plan, self.submission.restore_step)

    def _restore(self, shell: NodeShell, plan: LaunchPlan, step: int) -> None:
        assert self.sync is not None and self.source is not None
        with self.ctx.reporter.step(f"bring checkpoint-{step} back from {self.where}"):
            staging = self.files.path / ".restore"
            folder = download_checkpoint(self.sync.storage, self.sync.base, step, staging)
            self.source.place(folder)
            restore_checkpoint(self.ctx, shell, list(plan.nodes), RemoteLayout(plan.home).run_dir(plan.run))
        self.report(f"checkpoint-{step} brought back from {self.where}")

    def on_event(self, event: RunEvent) -> None:
        if self.sync is None:
            return
        if event.kind == "checkpoint" and event.step is not None:
            # Before the checkpoint, whose manifest makes it durable: a run resumed from a durable
            # checkpoint after every node was lost has its curves up to that step too.
            self.sync.tensorboard(self.files.tensorboard)
            self.sync.checkpoint(event.step)
            self.sync.log_files()  # a new master carries the log on from storage: as new as the checkpoint
        elif event.kind == "step" and time.monotonic() - self._logged > LOG_EVERY_SECONDS:
            self._logged = time.monotonic()
            self.sync.log_files()

    @property
    def durable_step(self) -> int | None:
        return self.sync.durable if self.sync else None

    def finish(self, state: RunState) -> bool:
        """Store the results (after a success) and the final log; True when everything is stored."""
        if self.sync is None:
            return True
        if state is RunState.SUCCEEDED:
            self.sync.results()
        else:
            self.sync.log_files()
        self.sync.tensorboard(self.files.tensorboard)
        done = self.sync.close(DRAIN_SECONDS)
        return done and self.sync.failures == 0

    def queued_record(self) -> None:
        """A queued run's record, in storage before it starts: if the master is lost meanwhile, `runs`
        still names the run and how to submit it again."""
        location = self.submission.storage
        if location is None:
            return
        try:
            storage = self.ctx.provider.open_storage(location)
            storage.put_file(self.files.record, f"{location.run_key(self.ctx.config.name, self.submission.plan.run)}/"
                                                f"{self.files.record.name}")
        except Exception as exc:  # noqa: BLE001 - storage never fails the run; the agent's log says why
            self.report(f"storing the queued run's record failed ({type(exc).__name__}: {exc})")

    def final_record(self) -> None:
        """The record as the run ended it (with its newest durable checkpoint), stored last."""
        if self.sync is not None:
            try:
                self.sync.storage.put_file(self.files.record, f"{self.sync.base}/{self.files.record.name}")
            except Exception as exc:  # noqa: BLE001 - storage never fails the run; the agent's log says why
                self.report(f"storing the run's record failed ({type(exc).__name__}: {exc})")


RETRY_DELAYS = (2, 5, 15, 30, 60)
# A job still running after this long is reported, with every thread's stack in the agent's log:
# an upload that hangs (rather than fails) would otherwise hold every later checkpoint back in silence.
SLOW_SECONDS = 180.0
Job = Callable[[], None]


class StorageSync:
    def __init__(self, storage: Storage, cluster: str, run: str, source: CheckpointSource, keep: int,
                 logs: list[Path], report: Callable[[str], None],
                 outputs: tuple[str, ...] | None = TASK_RESULTS) -> None:
        self.storage, self.source, self.keep, self.logs, self.report = storage, source, keep, logs, report
        self.outputs = outputs  # None: all the run's output (a user's script)
        self.base = storage.location.run_key(cluster, run)
        self.durable: int | None = None
        self.failures = 0
        self._jobs: queue.Queue[tuple[str, Job] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="xc-storage", daemon=True)
        self._thread.start()

    def checkpoint(self, step: int) -> None:
        self._jobs.put((f"checkpoint-{step}", lambda: self._checkpoint(step)))

    def log_files(self) -> None:
        self._jobs.put(("the log and events", self._log_files))

    def results(self) -> None:
        self._jobs.put(("the results and the model", self._results))

    def tensorboard(self, nodes: Path) -> None:
        """The ranks' TensorBoard files (in the master's run folder) and the agent's of the nodes' use."""
        self._jobs.put(("the TensorBoard files", lambda: self._tensorboard(nodes)))

    def close(self, timeout: float) -> bool:
        """Wait for what is queued, up to `timeout` seconds; True if everything was stored."""
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            what, run = job
            watchdog = threading.Timer(SLOW_SECONDS, self._slow, (what,))
            watchdog.daemon = True
            watchdog.start()
            try:
                self._attempts(what, run)
            finally:
                watchdog.cancel()

    def _slow(self, what: str) -> None:
        self.report(f"storing {what} has taken over {SLOW_SECONDS:.0f}s so far; "
                    "the agent's log has its threads' stacks")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)

    def _attempts(self, what: str, run: Job) -> None:
        for delay in (*RETRY_DELAYS, None):
            try:
                run()
                break
            except Exception as exc:  # noqa: BLE001 - storage must never fail the training: report, retry
                self.report(f"storing {what} failed ({type(exc).__name__}: {exc})"
                            + (f"; retrying in {delay}s" if delay is not None else "; giving up on it"))
                if delay is None:
                    self.failures += 1
                else:
                    time.sleep(delay)

    def _checkpoint(self, step: int) -> None:
        local = self.source.snapshot(step)
        if not local.is_dir():
            # Retrying cannot bring it back, and every retry's wait would let the next ones go too.
            self.report(f"checkpoint-{step} was replaced by a newer one before it could be stored; skipped")
            return
        try:
            files = {str(p.relative_to(local)): p.stat().st_size for p in sorted(local.rglob("*")) if p.is_file()}
            prefix = f"{self.base}/checkpoints/checkpoint-{step}"
            for name in files:
                self.storage.put_file(local / name, f"{prefix}/{name}")
            self.storage.put_text(f"{prefix}/{MANIFEST}", json.dumps({"step": step, "files": files}, indent=1))
        finally:
            self.source.release(local)
        self.durable = step
        self._prune()

    def _prune(self) -> None:
        steps = durable_steps(self.storage, self.base)
        for old in steps[:-self.keep]:
            prefix = f"{self.base}/checkpoints/checkpoint-{old}"
            keys = [o.key for o in self.storage.objects(prefix)]
            self.storage.delete(sorted(keys, key=lambda k: not k.endswith(MANIFEST)))  # the manifest first

    def _log_files(self) -> None:
        for path in self.logs:
            if path.exists():
                self.storage.put_file(path, f"{self.base}/{path.name}")

    def _tensorboard(self, nodes: Path) -> None:
        local = self.source.results((TENSORBOARD_DIR,), with_model=False)
        try:
            folders = [(local / TENSORBOARD_DIR, f"{TENSORBOARD_DIR}/ranks"), (nodes, f"{TENSORBOARD_DIR}/nodes")]
            for folder, prefix in folders:
                for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
                    if path.is_file():
                        self.storage.put_file(path, f"{self.base}/results/{prefix}/{path.relative_to(folder)}")
        finally:
            self.source.release(local)

    def _results(self) -> None:
        local = self.source.results(self.outputs)
        try:
            for path in sorted(local.rglob("*")):
                if path.is_file():
                    name = path.relative_to(local)
                    top = "model" if name.parts[0] == "model" else "results"
                    key = f"{self.base}/{top}/{Path(*name.parts[1:]) if top == 'model' else name}"
                    self.storage.put_file(path, key)
        finally:
            self.source.release(local)
        self._log_files()
