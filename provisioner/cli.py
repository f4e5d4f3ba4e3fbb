"""The `xeoncluster` command line: parse arguments, call the lifecycle, render the result."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import click

from . import lifecycle, queries, render
from . import train as train_mod
from .stacks import get_stack
from .config import ClusterConfig, default_config_path, load_config
from .errors import ConfigError, XeonClusterError
from .progress import Reporter
from .providers import make_provider
from .session import Session
from .state import StateDir

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def cluster_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--config/--name/--provider/--region/--profile, accepted before or after the command."""
    options = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="cluster.yaml to read (default: ./cluster.yaml if present, else built-in defaults)"),
        click.option("--name", help="cluster name; each cluster has its own state folder"),
        click.option("--provider", type=click.Choice(["aws", "local"]), help="aws, or local (namespaces on this machine)"),
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


def resolve_config(ctx: click.Context, local: dict[str, Any], overrides: dict[str, Any] | None = None) -> ClusterConfig:
    merged = {k: v for k, v in ctx.obj.get("globals", {}).items() if v is not None}
    merged.update({k: v for k, v in local.items() if v is not None})
    path = merged.pop("config_path", None)
    if path is None:
        path = default_config_path()
    values = {key: merged.get(key) for key in ("name", "provider", "region", "profile")}
    values.update(overrides or {})
    config = load_config(path, values)
    if ctx.info_name in ("up", "plan"):
        return config
    return recorded_config(config.name, values) or config


def recorded_config(name: str, overrides: dict[str, Any]) -> ClusterConfig | None:
    """An existing cluster keeps the config it was created with (provider included), so
    `status`/`exec`/`train`/`down` need only --name; explicit flags still win."""
    try:
        record = StateDir(name).load()
    except XeonClusterError:
        return None  # a corrupt state file must not stop `down`
    if record is None:
        return None
    return load_config(None, {**record.config, **{k: v for k, v in overrides.items() if v is not None}})


def make_session(config: ClusterConfig) -> Session:
    """Tests inject a provider or SSH stand-in through click's context object (`obj=`)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None and ctx.find_root().obj else {}
    reporter = Reporter()
    provider_factory = obj.get("provider_factory", make_provider)
    session = Session(config=config, state=StateDir(config.name),
                                provider=provider_factory(config, reporter.info), reporter=reporter)
    if obj.get("shell_factory") is not None:
        session.shell_factory = obj["shell_factory"]
    return session


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
    overrides = launch_overrides(opts)
    session = make_session(resolve_config(ctx, opts, overrides))
    result = lifecycle.up(session, keep_on_failure=keep_on_failure)
    render.up_result(session, result)


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.option("--purge-images", is_flag=True, help="also delete the images this cluster baked")
@click.pass_context
def down(ctx: click.Context, purge_images: bool, **opts: Any) -> None:
    """Remove everything the cluster owns. Finds it by name/tag even if local state is gone; safe to repeat."""
    session = make_session(resolve_config(ctx, opts))
    with session.reporter.step(f"removing cluster '{session.config.name}'"):
        removed = lifecycle.down(session, purge_images=purge_images)
    render.removed(removed, session.config.name)


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="print machine-readable JSON")
@click.pass_context
def status(ctx: click.Context, as_json: bool, **opts: Any) -> None:
    """Show each node, its address and whether it answers over SSH."""
    session = make_session(resolve_config(ctx, opts))
    rows = queries.status(session)
    if as_json:
        click.echo(json.dumps({"cluster": session.config.name, "provider": session.config.provider,
                               "nodes": [asdict(r.node) | {"answers": r.answers, "detail": r.detail} for r in rows]},
                              indent=2))
        return
    render.status_table(session.config, rows)
    if not rows:
        raise XeonClusterError(f"cluster '{session.config.name}' has no nodes", hint="run `xeoncluster up` first")


@cli.command(context_settings={**CONTEXT, "ignore_unknown_options": True})
@cluster_options
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def ssh(ctx: click.Context, node: str, command: tuple[str, ...], **opts: Any) -> None:
    """Open a shell on NODE (node0 is the master), or run `-- CMD` there. Host keys are pinned."""
    config = resolve_config(ctx, opts)
    state = StateDir(config.name)
    record = state.load()
    if record is None:
        raise XeonClusterError(f"cluster '{config.name}' is not up", hint="run `xeoncluster up` first")
    names = [n["name"] for n in record.nodes]
    if node not in names:
        raise ConfigError(f"no node '{node}' in cluster '{config.name}'; nodes: {', '.join(names)}")
    argv = ["ssh", "-F", str(state.ssh_config), node, *command]
    os.execvp("ssh", argv)


@cli.command("exec", context_settings={**CONTEXT, "ignore_unknown_options": True})
@cluster_options
@click.option("--node", "only", multiple=True, help="run only on this node; repeatable (default: all)")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def exec_(ctx: click.Context, only: tuple[str, ...], command: tuple[str, ...], **opts: Any) -> None:
    """Run `-- CMD` on every node in parallel; each output line is prefixed with its node.

    The exit code is the highest exit code of any node.
    """
    session = make_session(resolve_config(ctx, opts))
    code = render.exec_stream(session, list(only), " ".join(command))
    sys.exit(code)


@cli.group(context_settings=CONTEXT, invoke_without_command=True)
@cluster_options
@click.pass_context
def images(ctx: click.Context, **opts: Any) -> None:
    """List the provider's xeoncluster images (subcommands: build, rm)."""
    ctx.obj["image_opts"] = opts
    if ctx.invoked_subcommand is None:
        session = make_session(resolve_config(ctx, opts))
        render.images_table(session.provider.images())


@images.command("build", context_settings=CONTEXT)
@click.option("--stack", type=click.Choice(["stock", "intel"]), help="software stack from ami/stacks.yaml")
@click.pass_context
def images_build(ctx: click.Context, stack: str | None) -> None:
    """Bake the image for the current config without keeping a cluster (reused by every later up)."""
    session = make_session(resolve_config(ctx, ctx.obj.get("image_opts", {}), {"stack": stack}))
    choice = lifecycle.build_image(session)
    click.echo(choice.describe())


@images.command("rm", context_settings=CONTEXT)
@click.argument("image_id")
@click.pass_context
def images_rm(ctx: click.Context, image_id: str) -> None:
    """Remove an image (and, on AWS, its snapshots)."""
    session = make_session(resolve_config(ctx, ctx.obj.get("image_opts", {})))
    removed = session.provider.remove_image(image_id)
    if removed.empty:
        raise ConfigError(f"no image '{image_id}'", hint="`xeoncluster images` lists them")
    render.removed(removed, image_id)


@cli.command(context_settings=CONTEXT)
@cluster_options
@launch_options
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON")
@click.pass_context
def plan(ctx: click.Context, as_json: bool, **opts: Any) -> None:
    """Show what `up` would create, which image and stack it would use, and the estimated $/hour.

    Makes only read-only calls; creates nothing.
    """
    overrides = launch_overrides(opts)
    session = make_session(resolve_config(ctx, opts, overrides))
    result = queries.plan(session)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))  # type: ignore[attr-defined]
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
@click.option("--model", help=f"hub id or a directory on the nodes (default {train_mod.DEFAULT_MODEL})")
@click.option("--run", help="run name (default TASK-TIMESTAMP); results go to the state folder's runs/RUN")
@click.option("--resume", is_flag=True, help="continue the run (default: the latest) from its last checkpoint")
@click.option("--ppn", type=int, help="ranks per node (default: one per socket)")
@click.option("--threads", type=int, help="OpenMP threads per rank (default: physical cores per rank)")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="extra environment for every rank; repeatable")
@click.option("--fetch-model", type=click.Path(file_okay=False, path_type=Path), help="copy the trained model here")
@click.option("--offline", is_flag=True, help="set HF_HUB_OFFLINE=1 on the nodes")
@click.option("--tune/--no-tune", default=True, show_default=True,
              help="--no-tune drops the computed threads/pinning/tcmalloc (for comparison)")
@click.option("--dry-run", is_flag=True, help="print the exact mpirun command and environment; run nothing")
@click.option("--nodes", type=int, help="with --dry-run and no cluster: plan for this many nodes")
@click.option("--instance-type", help="with --dry-run and no cluster: plan for this instance type")
@click.pass_context
def train(ctx: click.Context, task: str, trainer_args: tuple[str, ...], glue_task: str, demo: bool,
          dataset: str | None, train_file: Path | None, eval_file: Path | None, model: str | None, run: str | None,
          resume: bool, ppn: int | None, threads: int | None, env_pairs: tuple[str, ...], fetch_model: Path | None,
          offline: bool, tune: bool, dry_run: bool, nodes: int | None, instance_type: str | None,
          **opts: Any) -> None:
    """Fine-tune TASK (squad or glue) across every node with mpirun + PyTorch DDP.

    Ranks per node, threads, pinning and LD_PRELOAD come from each node's topology. Output is
    streamed, labelled by rank, and saved with metrics.json under the cluster's runs/ folder.
    Arguments after `--` go to the HF TrainingArguments (e.g. -- --learning_rate 5e-5).
    """
    request = train_mod.TrainRequest(
        task=task, glue_task=glue_task, dataset=dataset, train_file=train_file, eval_file=eval_file, model=model,
        demo=demo, run=run, resume=resume, ppn=ppn, threads=threads, env=train_mod.parse_env(env_pairs),
        trainer_args=tuple(a for a in trainer_args if a != "--"), fetch_model=fetch_model, offline=offline,
        tuned=tune)
    config = resolve_config(ctx, opts)
    if dry_run and (instance_type or nodes):
        stack = get_stack(config.stack)
        train_mod.check_request(request, stack)
        plan_ = train_mod.dry_run_plan(request, stack, instance_type or config.instance_types[0],
                                       nodes or config.nodes, config.ssh.user or "ubuntu")
        render.launch_plan(plan_)
        return
    runner = train_mod.TrainRunner(make_session(config), request, echo=render.echo_line)
    result = runner.run(dry_run)
    if isinstance(result, train_mod.LaunchPlan):
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
    except Exception as exc:  # noqa: BLE001 - a bug still gets one line; --debug shows where
        if debug:
            raise
        click.echo(f"error: internal error: {type(exc).__name__}: {exc} | hint: rerun with --debug for the "
                   "traceback and report it", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
