"""The `xeoncluster` group, the options every cluster command shares, and the per-command context."""
from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import click

from xeoncluster.cluster.command_context import CommandContext, make_context, resolve_config
from xeoncluster.providers.registry import specs
from xeoncluster.runs.display import inert

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's), as `xeoncluster --version` prints it."""
    try:
        return version("xeoncluster")
    except PackageNotFoundError:
        return "unknown (not installed: `pip install -e .` from a checkout)"


def cluster_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--config/--name/--provider/--region/--profile, accepted before or after the command."""
    options = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="cluster.yaml to read (default: ./cluster.yaml if present, else built-in defaults)"),
        click.option("--name", help="cluster name; each cluster has its own state folder"),
        click.option("--provider", type=click.Choice(list(specs())),
                     help="aws, or local (namespaces on this machine)"),
        click.option("--region", help="AWS region (default from config, else us-east-1)"),
        click.option("--profile", help="AWS profile from ~/.aws/config"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(context_settings=CONTEXT)
@click.version_option(package_version(), "--version", prog_name="xeoncluster", message="%(prog)s %(version)s")
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
    for line in config.moved_notes:
        click.echo(f"warning: {line}", err=True)
    context = make_context(config, obj.get("provider_factory"), obj.get("shell_factory"))
    context.reporter.shown = inert
    return context




class PassThroughCommand(click.Command):
    """A command whose arguments after the first `--` go, untouched, to another program (the ranks).

    Before `--`, only the command's own options and arguments are accepted: a misspelled option
    fails at once with click's suggestion, instead of reaching every rank after the launch."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        own, rest = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
        ctx.meta[PASS_THROUGH] = tuple(rest)
        return super().parse_args(ctx, own)


PASS_THROUGH = "xeoncluster.pass_through"


def pass_through(ctx: click.Context) -> tuple[str, ...]:
    return tuple(ctx.meta.get(PASS_THROUGH, ()))


def provider_given(ctx: click.Context, options: dict[str, Any]) -> bool:
    """Whether --provider was on the command line (before or after the command)."""
    obj = ctx.find_root().obj or {}
    return options.get("provider") is not None or obj.get("globals", {}).get("provider") is not None
