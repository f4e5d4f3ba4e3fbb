"""The commands that make, inspect and remove clusters: up, down, status, ssh, exec, images, plan."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from xeoncluster.cli import render
from xeoncluster.cli.group import CONTEXT, cli, cluster_options, command_context, provider_given
from xeoncluster.cluster.removals import find_removal
from xeoncluster.commands import exec as exec_cmd
from xeoncluster.commands import images as images_cmd
from xeoncluster.commands import plan as plan_cmd
from xeoncluster.commands import ssh as ssh_cmd
from xeoncluster.commands import status as status_cmd
from xeoncluster.commands.up import up as up_cmd
from xeoncluster.core.errors import NoStateError, XeonClusterError
from xeoncluster.operations import down as down_cmd
from xeoncluster.providers.abilities import HasOwners
from xeoncluster.providers.node_kinds import Market


def launch_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The cluster-shape options `up` and `plan` share; they arrive in **opts as config overrides."""
    options = [
        click.option("--nodes", type=int, help="total number of nodes, master included (1-256)"),
        click.option("--image", help="auto (bake once, then reuse), none (configure every node), or an image id"),
        click.option("--stack", type=click.Choice(["stock", "intel"]), help="software stack (ami/stacks.yaml)"),
        click.option("--market", type=click.Choice([Market.SPOT.value, Market.ON_DEMAND.value]),
                     help="AWS purchasing option"),
        click.option("--instance-type", "instance_types", multiple=True,
                     help="instance type; repeat for fallbacks"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def launch_overrides(opts: dict[str, Any]) -> dict[str, Any]:
    overrides = {key: opts.pop(key, None) for key in ("nodes", "image", "stack", "market")}
    overrides["instance_types"] = list(opts.pop("instance_types", ())) or None
    return overrides


@cli.command(context_settings=CONTEXT)
@cluster_options
@launch_options
@click.option("--keep-on-failure", is_flag=True, help="keep what a failed up created, for inspection")
@click.option("--idle-minutes", type=float, metavar="N",
              help="remove the cluster after N minutes with no run and nobody logged in over SSH "
                   "(default 60; 0 = never); on a cluster that is up, changes it in place")
@click.option("--max-hours", type=float, metavar="H",
              help="remove the cluster H hours after it was created, whatever runs (a run is checkpointed "
                   "to storage first; default: no deadline; 0 = none)")
@click.option("--max-cost", type=float, metavar="USD",
              help="remove the cluster once its nodes have cost USD (each node's $/hour since it launched), "
                   "whatever runs (a run is checkpointed to storage first; default: no ceiling; 0 = none); needs a "
                   "provider with prices; on a cluster that is up, changes it in place")
@click.option("--orphan-minutes", type=float, metavar="N",
              help="the nodes' dead-man switch: a node that hears from no agent for N minutes (its master gone), "
                   "with no run on it and nobody logged in, powers itself off (default 15; 0 = never)")
@click.pass_context
def up(ctx: click.Context, keep_on_failure: bool, idle_minutes: float | None, max_hours: float | None,
       max_cost: float | None, orphan_minutes: float | None, **opts: Any) -> None:
    """Create the cluster: key, network, image (baked once, then reused), nodes, ssh config, hostfile.

    If any step fails or you press Ctrl-C, everything this run created is removed again
    (unless --keep-on-failure) and the failed step and its log are named.

    The cluster removes itself when idle (--idle-minutes, default 60), at --max-hours or at --max-cost:
    its watch agent, on the master (or on this machine for local nodes), stores what runs left and terminates it.
    """
    overrides = launch_overrides(opts) | {"idle_minutes": idle_minutes, "max_hours": max_hours,
                                          "max_cost": max_cost, "orphan_minutes": orphan_minutes}
    context = command_context(ctx, opts, overrides, creating=True)
    render.up_result(up_cmd.run(context, keep_on_failure=keep_on_failure))


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.option("--purge-images", is_flag=True, help="also delete the images this cluster baked")
@click.option("--force", is_flag=True,
              help="remove the cluster even while another command (e.g. a `train` run) holds it; that run fails")
@click.option("--owner", metavar="ID", default=None,
              help="an administrator's: remove the cluster of the identity whose id its owner tag carries "
                   "(`down` otherwise looks only for your own resources of that name)")
@click.pass_context
def down(ctx: click.Context, purge_images: bool, force: bool, owner: str | None, **opts: Any) -> None:
    """Remove everything the cluster owns. Finds it by name/tag even if local state is gone; safe to repeat.

    Refused while a `train`, `up` or another `down` runs on the cluster, unless --force.
    """
    try:
        context = command_context(ctx, opts, locate=True)
        if owner is not None and isinstance(context.provider, HasOwners):
            context.provider.act_for(owner)
    except NoStateError as exc:
        down_cmd.forget(exc.name)
        earlier = find_removal(exc.name)
        click.echo(f"nothing to remove: {earlier.describe()}" if earlier else
                   f"nothing to remove for '{exc.name}': {exc.message}")
        return
    given = provider_given(ctx, opts)
    result = down_cmd.run(context, purge_images=purge_images, force=force, search=given)
    if result.earlier is not None:
        click.echo(f"nothing to remove: {result.earlier.describe()}"
                   " (pass --provider aws to search AWS by tag, --provider local for local nodes by name)")
        return
    render.removed(result.removed, result.cluster)
    for line in result.kept:
        click.echo(f"kept: {line}")


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="print machine-readable JSON")
@click.pass_context
def status(ctx: click.Context, as_json: bool, **opts: Any) -> None:
    """Show each node, its address and whether it answers over SSH.

    Exits 1 when any node does not answer, or is gone with nothing in its place (the table or JSON
    is printed first).
    """
    result = status_cmd.run(command_context(ctx, opts, locate=True))
    if as_json:
        render.as_json(result.to_dict())
    else:
        render.status_table(result)
    if result.gone:
        raise XeonClusterError(result.gone)
    if not result.nodes:
        raise XeonClusterError(f"cluster '{result.cluster}' has no nodes", hint="run `xeoncluster up` first")
    status_cmd.check_all_up(result)


@cli.command(context_settings={**CONTEXT, "ignore_unknown_options": True})
@cluster_options
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def ssh(ctx: click.Context, node: str, command: tuple[str, ...], **opts: Any) -> None:
    """Open a shell on NODE (node0 is the master), or run `-- CMD` there. Host keys are pinned."""
    argv = ssh_cmd.run(command_context(ctx, opts), node, command)
    os.execvp(argv[0], argv)


@cli.command("exec", context_settings={**CONTEXT, "ignore_unknown_options": True})
@cluster_options
@click.option("--node", "only", multiple=True, help="run only on this node; repeatable (default: all)")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def exec_(ctx: click.Context, only: tuple[str, ...], command: tuple[str, ...], **opts: Any) -> None:
    """Run `-- CMD` on every node in parallel; each output line is prefixed with its node.

    The exit code is the highest exit code of any node.
    """
    context = command_context(ctx, opts)
    nodes = exec_cmd.target_nodes(context, list(only))
    result = exec_cmd.run(context, nodes, " ".join(command), render.node_line_printer(nodes))
    render.exec_failures(result)
    sys.exit(result.exit_code)


@cli.group(context_settings=CONTEXT, invoke_without_command=True)
@cluster_options
@click.pass_context
def images(ctx: click.Context, **opts: Any) -> None:
    """List the provider's xeoncluster images (subcommands: build, rm)."""
    ctx.obj["image_opts"] = opts
    if ctx.invoked_subcommand is None:
        render.images_table(images_cmd.list_images(command_context(ctx, opts)))


@images.command("build", context_settings=CONTEXT)
@click.option("--stack", type=click.Choice(["stock", "intel"]), help="software stack (ami/stacks.yaml)")
@click.pass_context
def images_build(ctx: click.Context, stack: str | None) -> None:
    """Bake the image for the current config without keeping a cluster (reused by every later up)."""
    context = command_context(ctx, ctx.obj.get("image_opts", {}), {"stack": stack})
    click.echo(images_cmd.build(context).describe())


@images.command("rm", context_settings=CONTEXT)
@click.argument("image_id")
@click.pass_context
def images_rm(ctx: click.Context, image_id: str) -> None:
    """Remove an image (and, on AWS, its snapshots)."""
    result = images_cmd.remove(command_context(ctx, ctx.obj.get("image_opts", {})), image_id)
    render.removed(result.removed, result.image_id)


@cli.command(context_settings=CONTEXT)
@cluster_options
@launch_options
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON")
@click.pass_context
def plan(ctx: click.Context, as_json: bool, **opts: Any) -> None:
    """Show what `up` would create, which image and stack it would use, and the estimated $/hour.

    Makes only read-only calls; creates nothing.
    """
    result = plan_cmd.run(command_context(ctx, opts, launch_overrides(opts), creating=True))
    if as_json:
        render.as_json(result.to_dict())
    else:
        render.plan(result)


