"""The commands that read and steer runs the cluster's agent owns: runs, logs, cancel."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from xeoncluster.cli import render, render_runs
from xeoncluster.cli.group import CONTEXT, cli, cluster_options, command_context
from xeoncluster.cli.render_training import echo_line
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.commands import compare as compare_cmd
from xeoncluster.commands import runs as runs_cmd
from xeoncluster.commands import tensorboard as tensorboard_cmd
from xeoncluster.commands.storage import stored_runs as stored_runs_cmd
from xeoncluster.commands.train import train as train_cmd
from xeoncluster.runs.display import inert


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.argument("names", nargs=-1, metavar="[RUN|SWEEP]...")
@click.option("--compare", is_flag=True,
              help="the runs named (a sweep's name stands for all its runs; none: every run) side by side: "
                   "swept values, final and best eval scores, final train loss, steps, time, restarts, cost")
@click.option("--json", "as_json", is_flag=True,
              help="print a JSON list: run, task, state, step, total_steps, restarts, cost_usd, place, ...")
@click.pass_context
def runs(ctx: click.Context, names: tuple[str, ...], compare: bool, as_json: bool, **opts: Any) -> None:
    """List every run of the cluster, newest first: state (a queued run with its place in line),
    step/total, restarts, start, duration and what it has cost so far (node-hours at the nodes' $/hour,
    as `status` shows them). Works after `down` too, from storage."""
    if names and not compare:
        raise click.UsageError("naming runs needs --compare (`xeoncluster runs --compare RUN|SWEEP...`)")
    context = command_context(ctx, opts)
    if compare:
        compared = compare_cmd.compare(context, names)
        if as_json:
            render.as_json([c.to_dict() for c in compared])
        else:
            render_runs.compare_table(compared)
        return
    result = runs_cmd.list_runs(context)
    if as_json:
        render.as_json(result.summaries())
    else:
        render_runs.runs_table(result.records, result.cluster, result.notes, result.places)


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.argument("run", required=False)
@click.option("-f", "--follow", is_flag=True, help="keep following until the run ends (Ctrl-C stops following)")
@click.option("--fetch-model", type=click.Path(file_okay=False, path_type=Path),
              help="for a run that succeeded: also copy the trained model here")
@click.pass_context
def logs(ctx: click.Context, run: str | None, follow: bool, fetch_model: Path | None, **opts: Any) -> None:
    """Print the log of RUN (default: the newest run); with -f, follow it until the run ends.

    For a run that succeeded, its results are fetched into $XEONCLUSTER_HOME/results/NAME/RUN as an
    attached `train` does (metrics.json, predictions, loss.png; the model with --fetch-model).
    With -f the exit code is the run's.
    """
    context = command_context(ctx, opts)
    if not runs_cmd.cluster_is_up(context):
        _stored_logs(context, run)
        return
    record = runs_cmd.pick(context, runs_cmd.agent_host(context), run)
    outcome = train_cmd.follow(context, record.run, echo_line, fetch_model, to_the_end=follow,
                               fail=follow, steps=echo_line.steps())
    if outcome.detached or outcome.fetched is not None:
        render_runs.training_result(outcome, context.config.name)
    if not outcome.detached:
        click.echo(inert(runs_cmd.state_line(outcome.record)))


def _stored_logs(context: CommandContext, run: str | None) -> None:
    """The cluster is gone: the run's log and results come from storage."""
    stored = stored_runs_cmd.stored_run(context, run)
    for line in stored_runs_cmd.stored_log(context, stored.record.run).splitlines():
        echo_line(line)
    fetched = stored_runs_cmd.fetch_stored_results(context, stored.record.run)
    if fetched is not None:
        render_runs.training_result(train_cmd.TrainOutcome(stored.record, fetched), context.config.name)
    click.echo(inert(runs_cmd.state_line(stored.record) + f" (from storage: {runs_cmd.gone_note(context)})"))


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.argument("run", required=False)
@click.option("--all", "everything", is_flag=True, help="empty the queue and stop the active run")
@click.pass_context
def cancel(ctx: click.Context, run: str | None, everything: bool, **opts: Any) -> None:
    """Stop RUN (default: the active run) on every node. The ranks save a checkpoint first; the run's
    state becomes `cancelled`, and `train ... --run RUN --resume` can continue it later. A queued RUN
    leaves the queue without starting. --all cancels every queued run, then the active one."""
    if run is not None and everything:
        raise click.UsageError(f"give a RUN or --all, not both ({run!r} too)")
    context = command_context(ctx, opts)
    for record in runs_cmd.cancel(context, run, everything=everything):
        again = (f"; continue it with `xeoncluster train {record.task} --name {context.config.name} "
                 f"--run {record.run} --resume`") if record.started_at is not None else ""
        click.echo(inert(runs_cmd.state_line(record) + again))


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.argument("names", nargs=-1, metavar="[RUN|SWEEP]...")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="the local port (default: a free one)")
@click.pass_context
def tensorboard(ctx: click.Context, names: tuple[str, ...], port: int, **opts: Any) -> None:
    """Serve the TensorBoard scalars of RUN (default: the newest run; a sweep's name: all its runs) on
    this machine: loss, learning rate, evaluations and samples/s from the ranks, and each node's CPU,
    memory and network use from the run agent. While the cluster is up they come from its master
    (again every 30 s while a run is active), after `down` from storage. Needs TensorBoard here:
    pip install 'xeoncluster[tensorboard]'. Ctrl-C stops it."""
    tensorboard_cmd.check_installed()
    context = command_context(ctx, opts)
    board = tensorboard_cmd.gather(context, names)
    tensorboard_cmd.serve(board, port or tensorboard_cmd.free_port(), click.echo,
                          lambda: tensorboard_cmd.refresh_active(context, board))
