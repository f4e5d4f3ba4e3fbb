"""`xeoncluster train`: prepare the launch, hand the run to the cluster's run agent, then follow it.

The agent (xeoncluster/agent) owns the job from then on: mpiexec, the log, the record, recovery.
This command only submits and watches; if it dies, the run goes on, and `logs -f` picks it up.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.commands.storage.stored_runs import stored_runs
from xeoncluster.commands.train.train_results import Fetched, fetch_results, results_dir
from xeoncluster.commands.train.train_storage import clusters_with_run, no_checkpoint, run_storage, stored_checkpoint
from xeoncluster.core.errors import BusyError, ConfigError, TrainingError
from xeoncluster.core.stacks import get_stack
from xeoncluster.job import script_plan
from xeoncluster.job.script_plan import SCRIPT_LABELS
from xeoncluster.job.sweep import Axis, Point, points, with_params
from xeoncluster.job.train_plan import LaunchPlan, check_request, check_run_name, default_run_name, resume_command
from xeoncluster.job.train_request import AnyRequest, ScriptRequest
from xeoncluster.node.events.events import RunEvent
from xeoncluster.operations.train_prepare import Preparer
from xeoncluster.providers.abilities import require_prices
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs import client, watch_client
from xeoncluster.runs.follow import Follower
from xeoncluster.runs.host import AgentHost, MasterHost
from xeoncluster.runs.queue_order import ahead_of, place_line
from xeoncluster.runs.record import RunRecord, RunState
from xeoncluster.runs.submission import Submission
from xeoncluster.wire.layout import PACKAGE_ROOT


@dataclass
class Submitted:
    """A run handed to its agent."""

    plan: LaunchPlan
    cluster: str
    host: str
    queued: str = ""  # where it stands in the cluster's queue, when it waits for other runs


@dataclass
class TrainOutcome:
    record: RunRecord
    fetched: Fetched | None = None
    detached: bool = False
    seconds: float = 0.0
    results: list[Path] = field(default_factory=list)


@dataclass
class Planned:
    """What `--dry-run` shows: the launch of each run it would queue (one, without --sweep)."""

    runs: list[tuple[Point, LaunchPlan, tuple[str, ...]]]  # each with the arguments it passes after `--`


@dataclass(frozen=True)
class SubmitMode:
    """How `train` hands its request over: planned only, or submitted and then left or followed; one run,
    or with `axes` one per combination of the swept values."""

    dry_run: bool = False
    detach: bool = False
    axes: tuple[Axis, ...] = ()


def run(ctx: CommandContext, request: AnyRequest, how: SubmitMode, echo: Callable[[str], None],
        steps: Callable[[RunEvent], None] | None = None) -> Planned | list[Submitted] | list[TrainOutcome]:
    """One run, or one per combination of the swept values, queued in that order. `echo` is told each log
    line, `steps` (if given) each of the ranks' events."""
    dry_run, detach, axes = how.dry_run, how.detach, how.axes
    check_run_name(request.run)
    if axes and request.resume:
        raise ConfigError("--sweep starts new runs; it cannot --resume one", hint="resume each run with --run RUN "
                          "--resume, or drop --resume")
    stack = get_stack(ctx.config.stack)
    check_request(request, stack)
    if request.max_cost is not None:
        require_prices(ctx.provider, "--max-cost")
    record = ctx.require_up()
    size = int(record.config.get("nodes", len(record.nodes)))
    if request.min_nodes > size:
        raise ConfigError(f"--min-nodes {request.min_nodes} is more than cluster {record.name}'s {size} node(s)",
                          hint=f"give --min-nodes {size} or less, or grow the cluster: xeoncluster up --name "
                               f"{record.name} --nodes {request.min_nodes}")
    shell = ctx.shell()
    try:
        host = client.host_for(ctx, shell, record)
        name = request.run or _latest_run(ctx, host, request) if request.resume else request.run
        todo = _runs(name or default_run_name(request), axes)
        preparers = [(point, Preparer(ctx, with_params(replace(request, run=run), point.params), stack,
                                      record.node_list())) for run, point in todo]
        if dry_run:
            return Planned([(point, p.prepare(shell, p.request.run or "", sync=False), p.request.trainer_args)
                            for point, p in preparers])
        submitted = [_submit(ctx, shell, host, record, p, p.request.run or "", point) for point, p in preparers]
    finally:
        shell.close()
    if detach:
        return submitted
    return _follow_all(ctx, submitted, echo, request.fetch_model, steps)


def _runs(name: str, axes: tuple[Axis, ...]) -> list[tuple[str, Point]]:
    todo = points(name, axes) if axes else [(name, Point())]
    for run, _ in todo:
        check_run_name(run)
    return todo


def _follow_all(ctx: CommandContext, submitted: list[Submitted], echo: Callable[[str], None],
                fetch_model: Path | None, steps: Callable[[RunEvent], None] | None) -> list[TrainOutcome]:
    """Each run in turn; with several, each model goes to its own folder, and the first failure is the
    command's once all have been followed."""
    outcomes = []
    for item in submitted:
        model = fetch_model / item.plan.run if fetch_model is not None and len(submitted) > 1 else fetch_model
        outcome = follow(ctx, item.plan.run, echo, model, fail=len(submitted) == 1, steps=steps)
        outcomes.append(outcome)
        if outcome.detached:
            break
    failed = next((o.record for o in outcomes if o.record.state.finished and o.record.state is not RunState.SUCCEEDED),
                  None)
    if failed is not None and len(submitted) > 1:
        raise _failed(ctx, failed)
    return outcomes


def _submit(ctx: CommandContext, shell: NodeShell, host: AgentHost, record: ClusterRecord, preparer: Preparer,
            run: str, point: Point) -> Submitted:
    """Under the cluster's lock: a second `train`, `up` or `down` waits or is refused meanwhile."""
    with ctx.state.lock(f"train --run {run}"):
        pending = client.line(host, ctx.config.name)
        same = next((r for r in pending if r.run == run), None)
        if same is not None:
            raise ConfigError(f"run {run} is already {same.state.value} on cluster '{ctx.config.name}'",
                              hint=f"pick another --run, or `xeoncluster cancel {run} --name {ctx.config.name}` "
                                   "first")
        if watch_client.removing(host, ctx.config.name):
            raise BusyError(f"cluster '{ctx.config.name}' is removing itself (idle, or at its max_hours or max_cost)",
                            hint=f"`xeoncluster up --name {ctx.config.name}` starts it again once it is gone")
        location = run_storage(ctx, preparer.request, record)
        plan = preparer.prepare(shell, run)
        restore = None
        on_master = preparer.check_checkpoint(shell, plan.home, run) if preparer.request.resume else True
        if not on_master:
            restore = stored_checkpoint(ctx, location, run, preparer.request.resume_from)
            if restore is None:
                raise no_checkpoint(run, plan.nodes[0].name, location, on_master is not None,
                                    clusters_with_run(ctx, location, run))
        preparer.send_env_file(shell, run)
        client.install(ctx, shell, host, record)
        request = _for_host(preparer.request, host, plan)
        started = RunRecord(run=run, cluster=ctx.config.name, task=request.label, nodes=[n.name for n in plan.nodes],
                            sweep=point.sweep, params=dict(point.params),
                            command=resume_command(preparer.request, ctx.config.name, run, resume=False))
        submission = Submission(request, plan, location, ctx.config.storage.keep_checkpoints, restore)
        client.submit(host, ctx.config.name, submission, started)
        taken = client.start(host, ctx.config.name, run)
    queued = place_line(run, ahead_of(client.line(host, ctx.config.name), run)) if taken.waiting else ""
    ctx.reporter.info(queued or f"run {run}: {plan.ranks.world_size} ranks on {len(plan.nodes)} node(s), supervised "
                                f"by its agent on {host.name}")
    return Submitted(plan, ctx.config.name, host.name, queued)


def _for_host(request: AnyRequest, host: AgentHost, plan: LaunchPlan) -> AnyRequest:
    """Data files as the agent's host sees them: a master has the copies synced to it, not the user's."""
    if not isinstance(host, MasterHost):
        return replace(request, fetch_model=None)

    def on_master(path: Path | None) -> Path | None:
        return Path(f"{plan.home}/{PACKAGE_ROOT}/data/{_digest_dir(path)}/{path.name}") if path else None

    if isinstance(request, ScriptRequest):
        moved = replace(request, fetch_model=None, data=tuple(filter(None, map(on_master, request.data))))
        return script_plan.as_synced(moved, plan.home)
    return replace(request, fetch_model=None, train_file=on_master(request.train_file),
                   eval_file=on_master(request.eval_file))


def _digest_dir(path: Path) -> str:
    from xeoncluster.remote.package_sync import tree_digest

    return tree_digest(path.parent, [path])


def _latest_run(ctx: CommandContext, host: AgentHost, request: AnyRequest) -> str:
    """The newest run of this task, whatever its name."""
    runs = [r for r in client.list_records(host, ctx.config.name) if r.task == request.label]
    if not runs:  # a master that is new (every node was lost): the runs storage kept with a checkpoint
        runs = [s.record for s in stored_runs(ctx, ctx.config.name, request.storage)
                if s.record.task == request.label and s.checkpoints]
    if not runs:
        raise ConfigError(f"no earlier {request.label} run on cluster '{ctx.config.name}' to resume, on it or in "
                          "storage",
                          hint="start one without --resume, or name the run with --run RUN --resume")
    return runs[0].run


def follow(ctx: CommandContext, run: str, echo: Callable[[str], None], fetch_model: Path | None = None,
           to_the_end: bool = True, fail: bool = True, steps: Callable[[RunEvent], None] | None = None,
           ) -> TrainOutcome:
    """Show the run's log until it ends (Ctrl-C detaches), then fetch its results. `fail`: a run that
    ended without success is an error with the run's exit code."""
    started = time.monotonic()
    follower = Follower(lambda: _connect(ctx), ctx.config.name, run, echo, ctx.reporter.warn, steps=steps)
    try:
        record = follower.follow(to_the_end)
    except KeyboardInterrupt:
        record = RunRecord(run=run, cluster=ctx.config.name, task="", state=RunState.RUNNING)
        return TrainOutcome(record, detached=True)
    outcome = TrainOutcome(record, seconds=time.monotonic() - started)
    if record.state is RunState.SUCCEEDED:
        outcome.fetched = fetch_run_results(ctx, run, record, fetch_model)
    elif record.state.finished and fail:
        raise _failed(ctx, record)
    return outcome


def _connect(ctx: CommandContext) -> AgentHost:
    record = ctx.require_up(ready=False)
    return client.host_for(ctx, ctx.shell(), record)


def fetch_run_results(ctx: CommandContext, run: str, record: RunRecord, fetch_model: Path | None = None) -> Fetched:
    """Into the results folder of the run asked for: the record (the master's) must be that run's."""
    untrusted.same_run(record.run, run, "the master's run record")
    cluster = ctx.require_up(ready=False)
    master: Node = cluster.node_list()[0]
    shell = ctx.shell()
    try:
        return fetch_results(shell, master, run, results_dir(ctx, run), fetch_model,
                             everything=record.task.startswith(SCRIPT_LABELS))
    finally:
        shell.close()


def _failed(ctx: CommandContext, record: RunRecord) -> TrainingError:
    name = ctx.config.name
    if record.state is RunState.CANCELLED:
        error = TrainingError(f"run {record.run} was cancelled at step {record.step}; its checkpoints are kept",
                              hint=f"continue it with `xeoncluster train ... --name {name} --run {record.run} "
                                   "--resume`")
    else:
        error = TrainingError(f"run {record.run} failed: {record.error}", log=Path(record.log) if record.log else None,
                              hint=f"`xeoncluster logs {record.run} --name {name}` shows its log")
    error.exit_code = record.exit_code or 1
    return error
