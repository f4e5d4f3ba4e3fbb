"""The commands that read and steer runs the cluster's agent owns: runs, logs, cancel."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from xeoncluster.cli import render, render_runs
from xeoncluster.cli.group import CONTEXT, cli, cluster_options, command_context
from xeoncluster.commands import runs as runs_cmd
from xeoncluster.commands import stored_runs as stored_runs_cmd
from xeoncluster.commands import train as train_cmd
from xeoncluster.context import CommandContext


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.option("--json", "as_json", is_flag=True,
              help="print a JSON list: run, task, state, step, total_steps, restarts, cost_usd, ...")
@click.pass_context
def runs(ctx: click.Context, as_json: bool, **opts: Any) -> None:
    """List every run of the cluster, newest first: state, step/total, restarts, start, duration and
    what it has cost so far (node-hours at the nodes' $/hour, as `status` shows them)."""
    result = runs_cmd.list_runs(command_context(ctx, opts))
    if as_json:
        render.as_json([r.summary() for r in result.records])
    else:
        render_runs.runs_table(result.records, result.cluster, result.notes)


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
    outcome = train_cmd.follow(context, record.run, render.echo_line, fetch_model, to_the_end=follow,
                               fail=follow)
    if outcome.detached or outcome.fetched is not None:
        render_runs.training_result(outcome, context.config.name)
    if not outcome.detached:
        click.echo(runs_cmd.state_line(outcome.record))


def _stored_logs(context: CommandContext, run: str | None) -> None:
    """The cluster is gone: the run's log and results come from storage."""
    stored = stored_runs_cmd.stored_run(context, run)
    for line in stored_runs_cmd.stored_log(context, stored.record.run).splitlines():
        render.echo_line(line)
    fetched = stored_runs_cmd.fetch_stored_results(context, stored.record.run)
    if fetched is not None:
        render_runs.training_result(train_cmd.TrainOutcome(stored.record, fetched), context.config.name)
    click.echo(runs_cmd.state_line(stored.record) + f" (from storage: {runs_cmd.gone_note(context)})")


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.argument("run", required=False)
@click.pass_context
def cancel(ctx: click.Context, run: str | None, **opts: Any) -> None:
    """Stop RUN (default: the active run) on every node. The ranks save a checkpoint first; the run's
    state becomes `cancelled`, and `train ... --run RUN --resume` can continue it later."""
    context = command_context(ctx, opts)
    record = runs_cmd.cancel(context, run)
    click.echo(runs_cmd.state_line(record) + f"; continue it with `xeoncluster train {record.task} "
               f"--name {context.config.name} --run {record.run} --resume`")
