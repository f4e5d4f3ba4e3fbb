"""`xeoncluster runs`, `logs` and `cancel`: what the cluster's run agent keeps, read from its host.

The run records on the agent's host are the truth. A record whose agent is no longer alive is shown
as it was left, with a note; a master that is gone takes its agent with it, and the way back is
named: `up` repairs the cluster, then `train --resume`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.removals import find_removal
from xeoncluster.commands.self_removed import removed_itself
from xeoncluster.commands.storage.stored_runs import stored_runs
from xeoncluster.core.errors import ConfigError, XeonClusterError
from xeoncluster.runs import client
from xeoncluster.runs.host import AgentHost
from xeoncluster.runs.queue_order import line_up
from xeoncluster.runs.record import RunRecord, RunState


@dataclass
class RunsResult:
    cluster: str
    records: list[RunRecord]
    notes: list[str] = field(default_factory=list)
    places: dict[str, int] = field(default_factory=dict)  # a queued run's place in line (the active run is 1st)

    def summaries(self) -> list[dict[str, object]]:
        return [r.summary() | {"place": self.places.get(r.run)} for r in self.records]


def agent_host(ctx: CommandContext) -> AgentHost:
    """The agent's host, or one error that says the master (and with it the agent) is gone."""
    record = ctx.require_up(ready=False)
    try:
        return client.host_for(ctx, ctx.shell(), record, warn=True)
    except XeonClusterError as exc:
        raise XeonClusterError(
            f"cannot reach the master of cluster '{ctx.config.name}', where its run agent lives: {exc.message}",
            hint=f"if node0 is gone, its agent is too: `xeoncluster up --name {ctx.config.name}` repairs the "
                 f"cluster, then `xeoncluster train ... --name {ctx.config.name} --run RUN --resume`") from None


def cluster_is_up(ctx: CommandContext) -> bool:
    try:
        record = ctx.state.load()
    except XeonClusterError:
        return False
    return record is not None and bool(record.nodes)


def gone_note(ctx: CommandContext) -> str:
    removal = find_removal(ctx.config.name)
    what = removal.describe() if removal else f"cluster '{ctx.config.name}' is not up on this machine"
    return f"{what}; these runs are kept in storage"


def list_runs(ctx: CommandContext) -> RunsResult:
    if not cluster_is_up(ctx):
        return _stored(ctx, gone_note(ctx))
    try:
        host = agent_host(ctx)
    except XeonClusterError:
        removal = removed_itself(ctx, ctx.state.load())
        if removal is None:
            raise
        return _stored(ctx, f"{removal.describe()}; these runs are kept in storage")
    records = client.list_records(host, ctx.config.name, ctx.reporter.warn)
    alive = {r.run: client.agent_alive(host, r) for r in records if not r.state.finished}
    notes = [_orphan_note(record, f"its agent on {host.name} is gone") for record in records
             if not record.state.finished and not alive[record.run]]
    line = line_up(records, lambda record: alive.get(record.run, False))
    places = {r.run: place for place, r in enumerate(line, 1) if r.waiting}
    return RunsResult(ctx.config.name, records, notes, places)


def _stored(ctx: CommandContext, why: str) -> RunsResult:
    """The cluster (or its master) is gone: the runs storage keeps, and what became of the queued ones."""
    records = [s.record for s in stored_runs(ctx, ctx.config.name)]
    never = [_orphan_note(r, "its cluster or master went first") for r in records if r.waiting]
    return RunsResult(ctx.config.name, records, [why, *never])


def _orphan_note(record: RunRecord, why: str) -> str:
    if not record.waiting:
        return f"run {record.run}: {why}; it stopped at step {record.step}"
    again = f": submit it again with `{record.command}`" if untrusted.printable(record.command) else ""
    return f"run {record.run} was {record.state.value} and never started ({why}){again}"


def pick(ctx: CommandContext, host: AgentHost, run: str | None) -> RunRecord:
    """The named run, or the newest; bad input (no such run, no run yet) is one line and exit 2."""
    records = client.list_records(host, ctx.config.name, ctx.reporter.warn)
    if not records:
        raise ConfigError(f"cluster '{ctx.config.name}' has no run yet",
                          hint=f"start one with `xeoncluster train squad --name {ctx.config.name}`")
    if run is None:
        return records[0]
    found = next((r for r in records if r.run == run), None)
    if found is None:
        known = ", ".join(r.run for r in records[:5])
        raise ConfigError(f"no run '{run}' on cluster '{ctx.config.name}' (its runs: {known})",
                          hint="`xeoncluster runs` lists them; a run of another cluster needs its --name")
    return found


def cancel(ctx: CommandContext, run: str | None, wait: float = 300.0, everything: bool = False) -> list[RunRecord]:
    """Cancel one run (default: the active one), or with `everything` the queue and the active run: the
    queued ones first, so none starts as the active one ends. A queued run ends without starting."""
    host = agent_host(ctx)
    if everything:
        targets = list(reversed(client.line(host, ctx.config.name)))
        if not targets:
            raise ConfigError(f"cluster '{ctx.config.name}' has no active or queued run; there is nothing to cancel",
                              hint="`xeoncluster runs` shows its runs")
    else:
        targets = [_cancellable(ctx, host, pick(ctx, host, run or _active_or_newest(ctx, host)))]
    for record in targets:
        client.request_cancel(host, ctx.config.name, record.run)
        ctx.reporter.info(f"asked run {record.run} to stop: every rank saves a checkpoint, then stops"
                          if not record.waiting else f"asked queued run {record.run} to leave the queue")
    deadline = time.monotonic() + wait
    return [_ended(ctx, host, record.run, deadline) for record in targets]


def _cancellable(ctx: CommandContext, host: AgentHost, record: RunRecord) -> RunRecord:
    if record.state.finished:
        raise ConfigError(f"run {record.run} has already {record.state.value}; there is nothing to cancel",
                          hint="`xeoncluster runs` shows which runs are active or queued")
    if not client.agent_alive(host, record):
        raise XeonClusterError(f"run {record.run}'s agent on {host.name} is gone; nothing runs it any more",
                               hint=f"continue it with `xeoncluster train ... --name {ctx.config.name} "
                                    f"--run {record.run} --resume`")
    return record


def _ended(ctx: CommandContext, host: AgentHost, run: str, deadline: float) -> RunRecord:
    while time.monotonic() < deadline:
        current = client.read_record(host, ctx.config.name, run)
        if current is not None and current.state.finished:
            return current
        time.sleep(1.0)
    raise XeonClusterError(f"run {run} did not stop in time",
                           hint=f"`xeoncluster logs {run} --name {ctx.config.name}` shows what it does")


def _active_or_newest(ctx: CommandContext, host: AgentHost) -> str | None:
    active = client.active_run(host, ctx.config.name)
    return active.run if active is not None else None


def state_line(record: RunRecord) -> str:
    step = f"step {record.step}/{record.total_steps}" if record.total_steps else f"step {record.step}"
    tail = f": {record.error}" if record.error and record.state is RunState.FAILED else ""
    return f"run {record.run}: {record.state.value}, {step}, {len(record.restarts)} restart(s){tail}"
