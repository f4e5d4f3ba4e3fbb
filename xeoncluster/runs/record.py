"""A run's record: the one truth that `runs`, `logs` and `status` read, written only by its agent.

Each run has a folder on the agent's host (the master on AWS, this machine for local nodes):

    run.json       this record (atomic writes)
    request.json   what `train` submitted: the request and its launch plan
    env            the --env values (mode 0600), never in request.json
    launch.json    the launch the job runs now (command, environment), for people
    train.log      every rank's output, labelled by rank
    events.jsonl   the ranks' typed events (xeoncluster/node/events/events.py)
    agent.log      the agent's own progress and errors
    usage.jsonl    each node's CPU, memory and network use, sampled while the run is active
    stacks/        every rank's Python stacks, saved when the run stalled
    tensorboard/   the nodes' use as TensorBoard scalars (the ranks' own go to the master's run folder)
    cancel         present once `cancel` asked the run to stop
"""
from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from xeoncluster.cluster.state import atomic_write
from xeoncluster.cluster.untrusted import Amount, Count, ExitCode, Measure, Pid, Timestamp
from xeoncluster.node.diagnostics.startup_clock import HELD, PARTS
from xeoncluster.runs.zone_traffic import ZoneTraffic
from xeoncluster.wire.contract import Versioned
from xeoncluster.wire.layout import RunFolder


class RunState(StrEnum):
    SUBMITTED = "submitted"    # written by `train`; the agent has not picked it up yet
    QUEUED = "queued"          # its agent waits for the runs before it to end (agent/queue.py)
    STARTING = "starting"
    RUNNING = "running"
    RECOVERING = "recovering"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


# How the error of a run its agent stopped at its `train --max-cost` ceiling starts (state: cancelled).
CEILING_STOP = "stopped at its --max-cost ceiling"
IN_PLACE = "every node"  # Restart.node of a run restarted on the nodes it had (it stalled; none was lost)


class RestartKind(StrEnum):
    """What a restart answered: --max-interruptions bounds the one, --max-restarts the other."""

    INTERRUPTION = "interruption"  # a node was lost: noticed, reclaimed, or gone without a word
    FAILURE = "failure"            # the job itself, with every node there (it stalled)


class Restart(BaseModel):
    node: str
    reason: str
    from_step: Count | None  # the checkpoint resumed from; None: from the start
    seconds: Amount
    lost_steps: Count
    replacement: str = ""  # the node that took over (its own name, or a new one when replaced ahead of time)
    began_at: Timestamp = 0.0  # when the agent began recovering (the job had ended); 0: not recorded
    prepare_seconds: Amount = 0.0  # after the recovery, preparing the relaunch (topology, package and data sync)
    kind: RestartKind = RestartKind.INTERRUPTION
    nodes_after: Count | None = None  # a lost node with no replacement: the nodes the run trained on after
    replacing: bool = False  # with nodes_after: shrunk while the replacement boots (a growth follows), not for capacity

    @model_validator(mode="before")
    @classmethod
    def _kind_of_old(cls, data: Any) -> Any:
        """Records before the kind was written: a restart on the same nodes was a stall, any other a loss."""
        if isinstance(data, dict) and "kind" not in data and data.get("node") == IN_PLACE:
            return {**data, "kind": RestartKind.FAILURE}
        return data

    def describe(self) -> str:
        start = f"checkpoint-{self.from_step}" if self.from_step is not None else "the start (no checkpoint yet)"
        took = f" by {self.replacement}" if self.replacement and self.replacement != self.node else ""
        if self.node == IN_PLACE:
            return (f"restart: {self.reason}; on the same nodes, resuming from {start}, {self.lost_steps} step(s) "
                    f"lost; the restart took {self.seconds:.0f}s")
        if self.nodes_after is not None and self.replacing:
            return (f"restart: {self.node} lost ({self.reason}); training on with {self.nodes_after} node(s) while "
                    f"it is replaced, resuming from {start}, {self.lost_steps} step(s) lost; recovery took "
                    f"{self.seconds:.0f}s")
        if self.nodes_after is not None:
            return (f"restart: {self.node} lost ({self.reason}); no replacement to be had: training on with "
                    f"{self.nodes_after} node(s), resuming from {start}, {self.lost_steps} step(s) lost; recovery "
                    f"took {self.seconds:.0f}s")
        return (f"restart: {self.node} lost ({self.reason}); replaced{took}, resuming from {start}, "
                f"{self.lost_steps} step(s) lost; recovery took {self.seconds:.0f}s")


class Growth(BaseModel):
    """A shrunk run that got its nodes back (agent/regrowth.py): neither a failure nor an interruption."""

    nodes: str              # the nodes that joined
    to_nodes: Count         # the nodes the run trains on from then
    from_step: Count | None
    seconds: Amount         # from the ranks' stop to the relaunch being prepared
    began_at: Timestamp = 0.0

    def describe(self) -> str:
        start = f"checkpoint-{self.from_step}" if self.from_step is not None else "the start (no checkpoint yet)"
        return (f"grew back: {self.nodes} joined; training on {self.to_nodes} node(s), resuming from {start}; "
                f"the change took {self.seconds:.0f}s")


class RankStartup(BaseModel):
    """Where one rank's start went in the run's latest launch, from its process start to its first step
    (node/diagnostics/startup_clock.py): the parts name what a slow relaunch waited on, rank by rank."""

    rank: Count
    node: str = Field(default="", max_length=64)
    parts: dict[str, Amount] = Field(default_factory=dict)

    @field_validator("parts")
    @classmethod
    def _known_parts(cls, parts: dict[str, float]) -> dict[str, float]:
        """A rank's words: only the parts the clock has become keys the laptop prints."""
        return {name: parts[name] for name in PARTS if name in parts}

    @property
    def seconds(self) -> float:
        """Its start's own time: a job started ahead waited for its release too (`held`), which is no start."""
        return sum(seconds for name, seconds in self.parts.items() if name != HELD)


class NodeUse(BaseModel):
    """One node's use over the agent's last two samples (agent/usage_watch.py)."""

    cpu_percent: Amount = 0.0    # of the CPUs the node's processes may use
    mem_percent: Amount = 0.0    # resident memory of the node's processes, of the node's memory
    rx_bytes_per_s: Amount = 0.0
    tx_bytes_per_s: Amount = 0.0
    at: Timestamp = 0.0
    low: bool = False           # far below the other nodes' CPU use: a straggler, or a rank that hangs


class Live(BaseModel):
    """An active run's pace, from its step events (agent/pace.py)."""

    loss: Measure | None = None
    step_seconds: Amount | None = None     # the median time of one step, lately
    steps_per_second: Amount | None = None
    eta_seconds: Amount | None = None
    projected_cost_usd: Amount | None = None  # the cost so far plus the nodes' price for the ETA
    last_step_at: Timestamp | None = None
    evals: dict[str, Measure] = Field(default_factory=dict)  # the newest evaluation's scores
    zone_traffic: ZoneTraffic | None = None  # the nodes sit in more than one zone: what the gradients cost


class RunRecord(Versioned):
    """The record as run.json holds it, flat, the one form every CLI and agent version reads (fields are
    only ever added, with defaults: wire/contract.py). Its fields answer three questions: what was asked
    (run, cluster, task, submitted_at, sweep, params, command, log), what happened (state, step,
    total_steps, restarts, stalls, started_at, ended_at, exit_code, error, agent_pid, nodes, notices, and
    what it cost and keeps: cost_usd, usd_per_hour, storage, durable_step, storage_error) and what is live
    (live, usage). `train` writes the first; from then on only the run's agent changes it, through
    agent/record_keeper.py's typed changes, grouped by the same questions."""

    run: str
    cluster: str
    task: str
    state: RunState = RunState.SUBMITTED
    step: Count = 0
    total_steps: Count | None = None
    restarts: list[Restart] = Field(default_factory=list)
    submitted_at: Timestamp = Field(default_factory=time.time)
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    exit_code: ExitCode | None = None
    error: str = ""              # the one line that says why a run failed
    agent_pid: Pid | None = None
    cost_usd: Amount = 0.0        # node-hours so far at the nodes' $/hour
    usd_per_hour: Amount = 0.0    # what the nodes cost now
    nodes: list[str] = Field(default_factory=list)
    notices: list[str] = Field(default_factory=list)  # nodes that announced they are going away
    log: str = ""                # where the run's log is: a path on this machine, or HOST:PATH
    storage: str = ""            # where the run is kept beyond the nodes (a provider's storage URL or a folder)
    durable_step: Count | None = None  # the newest checkpoint stored completely
    storage_error: str = ""      # the last upload that failed for good (training went on)
    sweep: str = ""              # the sweep this run is one of (`train --sweep`): its runs are SWEEP-1..N
    params: dict[str, str] = Field(default_factory=dict)  # the swept values this run was given
    command: str = ""            # the `xeoncluster train` line that submits this run again (--env values elided)
    live: Live = Field(default_factory=Live)
    usage: dict[str, NodeUse] = Field(default_factory=dict)  # node name -> its use, while the run is active
    stalls: Count = 0              # restarts because the step stopped advancing (agent/stall.py)
    size: Count | None = None      # the cluster's size, which a run trained on fewer nodes grows back to
    batch_world: Count | None = None  # the world its first launch had: the global batch is set for it
    growths: list[Growth] = Field(default_factory=list)
    startup: list[RankStartup] = Field(default_factory=list, max_length=4096)  # the latest launch's, by rank

    @property
    def shrunk(self) -> str:
        """'2/3 nodes' while the run trains on fewer nodes than its cluster's size; '' otherwise."""
        if self.size is None or not self.nodes or len(self.nodes) >= self.size or self.state.finished:
            return ""
        return f"{len(self.nodes)}/{self.size} nodes"

    @property
    def waiting(self) -> bool:
        """Not started yet: written by `train`, or queued behind other runs."""
        return self.state in (RunState.SUBMITTED, RunState.QUEUED)

    @property
    def seconds(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.time()) - self.started_at

    @property
    def lost_steps(self) -> int:
        return sum(r.lost_steps for r in self.restarts)

    def restarts_of(self, kind: RestartKind) -> int:
        return sum(r.kind is kind for r in self.restarts)

    def summary(self) -> dict[str, object]:
        """What `runs --json` prints for this run."""
        return {"run": self.run, "cluster": self.cluster, "task": self.task, "state": self.state.value,
                "step": self.step, "total_steps": self.total_steps, "restarts": len(self.restarts),
                "started_at": self.started_at, "ended_at": self.ended_at, "seconds": round(self.seconds, 1),
                "exit_code": self.exit_code, "cost_usd": round(self.cost_usd, 6), "error": self.error,
                "sweep": self.sweep, "params": dict(self.params), "live": self.live.model_dump(),
                "usage": {name: use.model_dump() for name, use in self.usage.items()},
                "startup": [rank.model_dump() for rank in self.startup]}


class RunFiles(RunFolder[Path]):
    """One run's folder on the agent's host, as the agent opens it: the folder's names (wire/layout.py)
    and the record's reading and writing."""

    def load(self) -> RunRecord | None:
        try:
            return RunRecord.model_validate_json(self.record.read_text(errors="replace"))
        except (OSError, ValueError):
            return None

    def save(self, record: RunRecord) -> None:
        atomic_write(self.record, record.model_dump_json(indent=2), 0o644)
