"""`xeoncluster storage ls|rm`: the runs kept in storage, which outlive their clusters and `down`."""
from __future__ import annotations

from typing import Any

import click

from xeoncluster.cli import render, render_runs
from xeoncluster.cli.group import CONTEXT, cli, cluster_options, command_context
from xeoncluster.commands.storage import storage_init
from xeoncluster.commands.storage import stored_runs as stored_cmd


@cli.group(context_settings=CONTEXT)
def storage() -> None:
    """The runs kept in storage (checkpoints, logs, results, models): they outlive the nodes and `down`.

    Storage is the config's `storage:` (auto: the provider's default, README says which; for local
    nodes $XEONCLUSTER_HOME/storage).
    """


@storage.command("ls", context_settings=CONTEXT)
@cluster_options
@click.option("--all", "every", is_flag=True, help="every cluster's runs, not only --name's")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_context
def storage_ls(ctx: click.Context, every: bool, as_json: bool, **opts: Any) -> None:
    """List the runs kept in storage: cluster, run, state, durable checkpoints and size."""
    context = command_context(ctx, opts)
    runs = stored_cmd.stored_runs(context, None if every else context.config.name)
    if as_json:
        render.as_json([r.record.summary() | {"checkpoints": list(r.checkpoints), "bytes": r.size_bytes}
                        for r in runs])
    else:
        render_runs.stored_table(runs, stored_cmd.open_storage(context)[0].url)


@storage.command("rm", context_settings=CONTEXT)
@cluster_options
@click.argument("run")
@click.pass_context
def storage_rm(ctx: click.Context, run: str, **opts: Any) -> None:
    """Remove RUN of cluster --name from storage: its checkpoints, logs, results and model. There is no
    other copy of its checkpoints; the results fetched to this machine stay."""
    context = command_context(ctx, opts)
    removed = stored_cmd.remove_stored_run(context, context.config.name, run)
    click.echo(f"removed run {run} of cluster '{context.config.name}' from storage ({removed} objects)")


@storage.command("init", context_settings=CONTEXT)
@cluster_options
@click.pass_context
def storage_init_command(ctx: click.Context, **opts: Any) -> None:
    """Administrator's one-time step per region: make the run storage and lock it down (on AWS, the
    account's auto bucket: private, encrypted, ACLs off, TLS only). Users' policies may not do this.
    Safe to repeat: what an existing bucket lacks is put back."""
    location = storage_init.init_storage(command_context(ctx, opts))
    click.echo(f"run storage ready: {storage_init.root_url(location)}")
