"""A run's storage, as the supervisor uses it: bring a checkpoint back before the first launch when the
master lost it, copy every checkpoint and the log as the run goes, and the results at its end."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from xeoncluster.agent.checkpoint_source import CheckpointSource, OnMaster, OverSsh
from xeoncluster.agent.recovery import restore_checkpoint
from xeoncluster.agent.storage_sync import StorageSync
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.job.train_request import ScriptRequest
from xeoncluster.node.events.events import RunEvent
from xeoncluster.providers.abilities import AgentOnMaster
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.record import RunFiles, RunState
from xeoncluster.runs.stored_checkpoints import download_checkpoint
from xeoncluster.runs.submission import Submission
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
            staging = Path(self.files.folder) / ".restore"
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
