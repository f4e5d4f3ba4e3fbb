"""One run as its agent holds it: what the loop, the watches, the queue turn and the recovery all read
and change (the launch now, its attempt, its pace), in one place rather than as one class's attributes."""
from __future__ import annotations

import threading
from dataclasses import InitVar, dataclass, field, replace

from xeoncluster.agent.attempt import Attempt
from xeoncluster.agent.handover import Handover
from xeoncluster.agent.pace import Pace
from xeoncluster.agent.prestart import Ahead
from xeoncluster.agent.proactive import Readying
from xeoncluster.agent.record_keeper import RecordKeeper
from xeoncluster.agent.regrowth import Regrowth
from xeoncluster.agent.run_storage import RunStorage
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.core.stacks import Stack, get_stack
from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.job.train_request import AnyRequest
from xeoncluster.node.events.events import NoticeEvent
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.record import RestartKind, RunFiles, RunRecord
from xeoncluster.runs.submission import Submission


@dataclass
class CurrentRun:
    ctx: CommandContext
    files: RunFiles
    keeper: RecordKeeper
    control: NodeShell  # commands while the streaming connection is busy
    request: AnyRequest
    plan: LaunchPlan
    submission: InitVar[Submission]
    storage: RunStorage = field(init=False)
    cancelled: threading.Event = field(default_factory=threading.Event)
    attempt: Attempt | None = None
    pace: Pace = field(default_factory=Pace)
    stalled: str = ""  # why the current launch was stopped as stalled, once it was
    verdict: str = ""  # why the run cannot go on, from the last recovery
    stopped: str = ""  # why the agent stopped the run short of its end (its --max-cost ceiling); "" for a cancel
    noticed: dict[str, NoticeEvent] = field(default_factory=dict)
    replacements: dict[str, Readying] = field(default_factory=dict)
    handover: Handover | None = None  # the master's successor, launched on the master's notice
    growth: Regrowth | None = None  # the nodes a shrunk run asks for, to grow back
    removals: list[threading.Thread] = field(default_factory=list)  # the last recovery's lost nodes being removed
    ahead: Ahead | None = None  # the next job, started and held while this one trains (agent/prestart.py)

    @classmethod
    def open(cls, ctx: CommandContext, files: RunFiles, submission: Submission) -> CurrentRun:
        record = files.load()
        if record is None:
            raise XeonClusterError(f"no run record in {files.path}")
        return cls(ctx, files, RecordKeeper(files, record), ctx.shell(), submission.request,
                   _as_seen_here(ctx, submission.plan), submission)

    def __post_init__(self, submission: Submission) -> None:
        self.storage = RunStorage(self.ctx, self.files, submission, self.storage_note)

    @property
    def record(self) -> RunRecord:
        return self.keeper.record

    def note(self, text: str) -> None:
        """What the agent did, in the run's log too: whoever follows the run sees it where the ranks' lines are."""
        self.ctx.reporter.warn(text)
        with open(self.files.log, "a") as log:
            log.write(f"agent: {text}\n")

    def storage_note(self, text: str) -> None:
        self.keeper.storage_failed(text)
        self.note(text)

    def stack(self) -> Stack:
        return get_stack(self.ctx.config.stack)

    def interruptions_left(self) -> bool:
        """Whether a lost node may still be replaced: node losses are not the job's failures."""
        bound = self.request.max_interruptions
        return bound is None or self.record.restarts_of(RestartKind.INTERRUPTION) < bound

    def failure_restarts_left(self) -> bool:
        return self.record.restarts_of(RestartKind.FAILURE) < self.request.max_restarts


def _as_seen_here(ctx: CommandContext, plan: LaunchPlan) -> LaunchPlan:
    """The plan `train` made names nodes as the user's machine reaches them; the agent reaches them as
    its own state says (on a master: over their private addresses)."""
    cluster = ctx.state.load()
    here = {n.name: n for n in cluster.node_list()} if cluster is not None else {}
    return replace(plan, nodes=tuple(here.get(n.name, n) for n in plan.nodes))
