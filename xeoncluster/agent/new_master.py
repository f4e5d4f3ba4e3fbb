"""Giving the agent's job to a new master: the agent installed there with the cluster's state, every
unfinished run copied (a started one set to resume from its newest durable checkpoint, and prepared again
on the nodes the cluster has now), the master lease handed to it, then its watch agent and the runs'
agents started in the order the runs go. A worker that takes a lost master's place (agent/takeover.py)
and a master that hands over ahead of its notice (agent/handover.py) both end this way; what they read is
the agent's home where they run (a worker's copy of it: agent/replica.py)."""
from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from xeoncluster.cluster.autostop import SETTINGS
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.master_lease import LeaseBook, MasterLease
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.node.events.events import read_events
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs import client
from xeoncluster.runs.host import AgentHost
from xeoncluster.runs.queue_order import order
from xeoncluster.runs.record import Restart, RunRecord, RunState
from xeoncluster.runs.stored_checkpoints import durable_steps
from xeoncluster.runs.submission import Submission
from xeoncluster.storage.base import Storage
from xeoncluster.wire.layout import AgentLayout, RunFolder


@dataclass
class NewMaster:
    ctx: CommandContext
    record: ClusterRecord  # with the new master in place of the old one
    storage: Storage
    why: str               # the restarts' reason, e.g. "the master was lost; node1 took over"
    began: float = field(default_factory=time.time)

    def unfinished(self) -> list[RunRecord]:
        """The runs to carry on, in the order they go, each as the newer of its two records: the copy here
        (a worker's is up to a beat old) and the one in storage (up to half a minute old; a run that ended
        since has its final record there)."""
        found = []
        for path in self.ctx.state.runs.glob(f"*/{RunFolder.RECORD}"):
            record = self._newer(RunRecord.model_validate_json(path.read_text()))
            if not record.state.finished:
                found.append(record)
        return sorted(found, key=order)

    def _newer(self, here: RunRecord) -> RunRecord:
        stored = self._stored(here, RunFolder.RECORD)
        try:
            there = RunRecord.model_validate_json(stored) if stored else None
        except ValueError:
            return here
        if there is None or there.run != here.run:
            return here
        newer = there.state.finished or (there.started_at or 0) > (here.started_at or 0) or there.step > here.step
        return there if newer else here

    def _stored(self, record: RunRecord, name: str) -> str | None:
        location = self.record.storage
        return self.storage.get_text(f"{location.run_key(record.cluster, record.run)}/{name}") if location else None

    def hand_over(self, shell: NodeShell, book: LeaseBook, lease: MasterLease) -> AgentHost:
        """Everything but the start last: a taker fenced meanwhile has started nothing."""
        host = client.host_for(self.ctx, shell, self.record)
        client.install(self.ctx, shell, host, self.record)
        runs = self.unfinished()
        for run in runs:
            self._copy(host, run)
        new = self.record.master
        assert new is not None
        book.hand_over(lease, new.id, new.name, time.time())
        self._start(host, runs)
        return host

    def _start(self, host: AgentHost, runs: list[RunRecord]) -> None:
        """The watch agent first (it keeps the lease and the workers' copies), then each run's agent."""
        cluster = self.record.name
        settings = self.ctx.state.path / SETTINGS
        where = AgentLayout(host.home).cluster(cluster)
        if settings.is_file():
            host.write(f"{where}/{SETTINGS}", settings.read_text())
            host.start(f"xeoncluster-watch-{cluster}", ["watch", cluster], f"{where}/watch.log")
        for run in runs:
            client.start(host, cluster, run.run)

    def _copy(self, host: AgentHost, record: RunRecord) -> None:
        """The run's files on the new master, as a submitted run its agent takes up there."""
        folder = self.ctx.state.runs / record.run
        env = (folder / RunFolder.ENV).read_text() if (folder / RunFolder.ENV).is_file() else "{}"
        submission = self._resumed(Submission.from_json((folder / RunFolder.REQUEST).read_text(), env), record)
        so_far = {name: self._so_far(folder / name, record, name) for name in (RunFolder.LOG, RunFolder.EVENTS)}
        if record.started_at is not None:
            reached = max(record.step, last_step(so_far[RunFolder.EVENTS]))
            record = record.model_copy(update={"restarts": [*record.restarts,
                                                            self._restart(submission.restore_step, reached)]})
        record = record.model_copy(update={"state": RunState.SUBMITTED, "agent_pid": None})
        target = client.run_folder(host, record.cluster, record.run)
        host.run(f"mkdir -p {shlex.quote(target.path)}")
        host.write(target.file(RunFolder.ENV), env, 0o600)
        host.write(target.file(RunFolder.REQUEST), submission.to_json())
        for name, text in so_far.items():
            host.write(target.file(name), text)
        host.write(target.file(RunFolder.RECORD), record.model_dump_json(indent=2))

    def _so_far(self, here: Path, record: RunRecord, name: str) -> str:
        """The run's log and events up to now, which its new agent appends to: from this agent's folder (a
        handover), else as storage last got them (a takeover: a worker's copy holds neither)."""
        if here.is_file():
            return here.read_text(errors="replace")
        return self._stored(record, name) or ""

    def _resumed(self, submission: Submission, record: RunRecord) -> Submission:
        """From the newest durable checkpoint in storage, whatever the copy of its record says (one a beat
        old may not know the run started); prepared again on the nodes the cluster has now in any case."""
        location = submission.storage
        steps = durable_steps(self.storage, location.run_key(record.cluster, record.run)) if location else []
        step = steps[-1] if steps else None
        return replace(submission, request=replace(submission.request, resume=step is not None),
                       restore_step=step, relaunch=True)

    def _restart(self, step: int | None, reached: int) -> Restart:
        return Restart(node="node0", reason=self.why, from_step=step, seconds=round(time.time() - self.began, 3),
                       lost_steps=max(0, reached - (step or 0)), replacement="node0", began_at=self.began)


def last_step(events: str) -> int:
    """The last step the ranks reported in the events so far (a record copied a beat ago may say less)."""
    return max((e.step for e in read_events(events) if e.kind == "step" and e.step is not None), default=0)
