"""The `xeoncluster` command line: parse arguments, call the command, render its result."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import render
from .commands import down as down_cmd
from .commands import exec as exec_cmd
from .commands import images as images_cmd
from .commands import plan as plan_cmd
from .commands import ssh as ssh_cmd
from .commands import status as status_cmd
from .commands import train as train_cmd
from .commands import up as up_cmd
from .context import CommandContext, make_context, resolve_config
from .errors import NoStateError, XeonClusterError
from .stacks import get_stack
from .train_plan import DEFAULT_MODEL, LaunchPlan, TrainRequest, check_request, dry_run_plan, parse_env

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def cluster_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--config/--name/--provider/--region/--profile, accepted before or after the command."""
    options = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="cluster.yaml to read (default: ./cluster.yaml if present, else built-in defaults)"),
        click.option("--name", help="cluster name; each cluster has its own state folder"),
        click.option("--provider", type=click.Choice(["aws", "local"]),
                     help="aws, or local (namespaces on this machine)"),
        click.option("--region", help="AWS region (default from config, else us-east-1)"),
        click.option("--profile", help="AWS profile from ~/.aws/config"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(context_settings=CONTEXT)
@cluster_options
@click.option("--debug", is_flag=True, help="show tracebacks for errors")
@click.pass_context
def cli(ctx: click.Context, debug: bool, **globals_: Any) -> None:
    """Short-lived Intel Xeon clusters for fine-tuning Hugging Face models.

    \b
    xeoncluster up --nodes 4        create (or reuse) an image and start the nodes
    xeoncluster train squad         fine-tune across every node with mpirun + DDP
    xeoncluster down                remove everything the cluster owns

    Try it without a cloud: add --provider local to run nodes as namespaces on this machine.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["globals"] = globals_


def command_context(ctx: click.Context, options: dict[str, Any], overrides: dict[str, Any] | None = None,
                    creating: bool = False, locate: bool = False) -> CommandContext:
    """Global options, then the command's; tests inject a provider or SSH stand-in through `obj`."""
    obj = ctx.find_root().obj or {}
    merged = {k: v for k, v in obj.get("globals", {}).items() if v is not None}
    merged.update({k: v for k, v in options.items() if v is not None})
    config = resolve_config(merged, overrides, creating=creating, locate=locate)
    return make_context(config, obj.get("provider_factory"), obj.get("shell_factory"))


def launch_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The cluster-shape options `up` and `plan` share; they arrive in **opts as config overrides."""
    options = [
        click.option("--nodes", type=int, help="total number of nodes, master included (1-256)"),
        click.option("--image", help="auto (bake once, then reuse), none (configure every node), or an image id"),
        click.option("--stack", type=click.Choice(["stock", "intel"]), help="software stack from ami/stacks.yaml"),
        click.option("--market", type=click.Choice(["spot", "on-demand"]), help="AWS purchasing option"),
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
@click.pass_context
def up(ctx: click.Context, keep_on_failure: bool, **opts: Any) -> None:
    """Create the cluster: key, network, image (baked once, then reused), nodes, ssh config, hostfile.

    If any step fails or you press Ctrl-C, everything this run created is removed again
    (unless --keep-on-failure) and the failed step and its log are named.
    """
    context = command_context(ctx, opts, launch_overrides(opts), creating=True)
    render.up_result(up_cmd.run(context, keep_on_failure=keep_on_failure))


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.option("--purge-images", is_flag=True, help="also delete the images this cluster baked")
@click.option("--force", is_flag=True,
              help="remove the cluster even while another command (e.g. a `train` run) holds it; that run fails")
@click.pass_context
def down(ctx: click.Context, purge_images: bool, force: bool, **opts: Any) -> None:
    """Remove everything the cluster owns. Finds it by name/tag even if local state is gone; safe to repeat.

    Refused while a `train`, `up` or another `down` runs on the cluster, unless --force.
    """
    try:
        context = command_context(ctx, opts, locate=True)
    except NoStateError as exc:
        down_cmd.forget(exc.name)
        click.echo(f"nothing to remove for '{exc.name}': {exc.message}")
        return
    result = down_cmd.run(context, purge_images=purge_images, force=force)
    render.removed(result.removed, result.cluster)


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="print machine-readable JSON")
@click.pass_context
def status(ctx: click.Context, as_json: bool, **opts: Any) -> None:
    """Show each node, its address and whether it answers over SSH.

    Exits 1 when any node does not answer (the table or JSON is printed first).
    """
    result = status_cmd.run(command_context(ctx, opts, locate=True))
    if as_json:
        render.as_json(result.to_dict())
    else:
        render.status_table(result)
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
@click.option("--stack", type=click.Choice(["stock", "intel"]), help="software stack from ami/stacks.yaml")
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


@cli.command(context_settings={**CONTEXT, "ignore_unknown_options": True})
@cluster_options
@click.argument("task", type=click.Choice(["squad", "glue"]))
@click.argument("trainer_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--task", "glue_task", default="mrpc", show_default=True, help="GLUE task name (glue only)")
@click.option("--demo", is_flag=True, help="offline demo: a tiny BERT and synthetic data built on the nodes")
@click.option("--dataset", help="Hugging Face dataset name (default: squad / glue)")
@click.option("--train-file", type=click.Path(dir_okay=False, path_type=Path),
              help="local training file (SQuAD JSON flat or nested; GLUE TSV/CSV/JSON); copied to every node")
@click.option("--eval-file", type=click.Path(dir_okay=False, path_type=Path), help="local evaluation file")
@click.option("--model", help=f"hub id or a directory on the nodes (default {DEFAULT_MODEL})")
@click.option("--run", help="run name (default TASK-TIMESTAMP); results go to the state folder's runs/RUN")
@click.option("--resume", is_flag=True, help="continue the run (default: the latest) from its last checkpoint")
@click.option("--ppn", type=int, help="ranks per node (default: one per socket)")
@click.option("--threads", type=int, help="OpenMP threads per rank (default: physical cores per rank)")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="extra environment for every rank; repeatable")
@click.option("--fetch-model", type=click.Path(file_okay=False, path_type=Path), help="copy the trained model here")
@click.option("--offline", is_flag=True, help="set HF_HUB_OFFLINE=1 on the nodes")
@click.option("--tune/--no-tune", default=True, show_default=True,
              help="--no-tune drops the computed threads/pinning/tcmalloc (for comparison)")
@click.option("--max-restarts", type=int, default=2, show_default=True,
              help="when a node is lost (spot reclaim, crash), replace it and resume from the newest checkpoint "
                   "this many times; 0 fails at once")
@click.option("--dry-run", is_flag=True, help="print the exact mpirun command and environment; run nothing")
@click.option("--nodes", type=int, help="with --dry-run and no cluster: plan for this many nodes")
@click.option("--instance-type", help="with --dry-run and no cluster: plan for this instance type")
@click.pass_context
def train(ctx: click.Context, task: str, trainer_args: tuple[str, ...], glue_task: str, demo: bool,
          dataset: str | None, train_file: Path | None, eval_file: Path | None, model: str | None, run: str | None,
          resume: bool, ppn: int | None, threads: int | None, env_pairs: tuple[str, ...], fetch_model: Path | None,
          offline: bool, tune: bool, max_restarts: int, dry_run: bool, nodes: int | None, instance_type: str | None,
          **opts: Any) -> None:
    """Fine-tune TASK (squad or glue) across every node with mpirun + PyTorch DDP.

    Ranks per node, threads, pinning and LD_PRELOAD come from each node's topology. Output is
    streamed, labelled by rank, and saved with metrics.json under the cluster's runs/ folder.
    Arguments after `--` go to the HF TrainingArguments (e.g. -- --learning_rate 5e-5).
    """
    request = TrainRequest(
        task=task, glue_task=glue_task, dataset=dataset, train_file=train_file, eval_file=eval_file, model=model,
        demo=demo, run=run, resume=resume, ppn=ppn, threads=threads, env=parse_env(env_pairs),
        trainer_args=tuple(a for a in trainer_args if a != "--"), fetch_model=fetch_model, offline=offline,
        tuned=tune, max_restarts=max_restarts)
    context = command_context(ctx, opts)
    config = context.config
    if dry_run and (instance_type is not None or nodes is not None):
        stack = get_stack(config.stack)
        check_request(request, stack)
        render.launch_plan(dry_run_plan(request, stack, instance_type or config.instance_types[0],
                                        config.nodes if nodes is None else nodes, config.ssh.user or "ubuntu"))
        return
    result = train_cmd.run(context, request, render.echo_line, dry_run)
    if isinstance(result, LaunchPlan):
        render.launch_plan(result)
    else:
        render.training_result(result)


def main() -> None:
    debug = "--debug" in sys.argv
    try:
        code = cli.main(standalone_mode=False, prog_name="xeoncluster")
        sys.exit(code if isinstance(code, int) else 0)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except XeonClusterError as exc:
        if debug:
            raise
        click.echo(f"error: {exc.one_line()}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except PermissionError as exc:
        if debug:
            raise
        click.echo(f"error: permission denied: {exc.filename or exc} | hint: it belongs to another user (root?): "
                   "run as that user (e.g. with sudo), or set XEONCLUSTER_HOME to a folder you own", err=True)
        sys.exit(1)
    except Exception as exc:  # a bug still gets one line; --debug shows where
        if debug:
            raise
        click.echo(f"error: internal error: {type(exc).__name__}: {exc} | hint: rerun with --debug for the "
                   "traceback and report it", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
