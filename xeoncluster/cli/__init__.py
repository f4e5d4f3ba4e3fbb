"""The `xeoncluster` command line: parse arguments, call the command, render its result.

Each module here registers its commands on the one group; the commands themselves live in
xeoncluster/commands/.
"""
from __future__ import annotations

import sys
from typing import Any

import click

from xeoncluster.cli import (  # noqa: F401 - importing them registers their commands
    cluster_commands,
    export_command,
    policy_command,
    runs_commands,
    storage_commands,
    train_command,
)
from xeoncluster.cli.group import cli
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.runs.display import inert

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None, obj: dict[str, Any] | None = None) -> None:
    """Run the CLI; expected errors become one line (a traceback with --debug, read from the parsed
    group options, so a `--debug` meant for the ranks after `--` does not count). Tests inject a
    provider or SSH stand-in through `obj`."""
    debug = False
    try:
        args = list(sys.argv[1:] if argv is None else argv)
        with cli.make_context("xeoncluster", args, obj=obj) as ctx:
            debug = bool(ctx.params.get("debug"))
            cli.invoke(ctx)
        sys.exit(0)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except XeonClusterError as exc:
        if debug:
            raise
        click.echo(f"error: {inert(exc.one_line())}", err=True)
        sys.exit(exc.exit_code)
    except PermissionError as exc:
        if debug:
            raise
        click.echo(f"error: permission denied: {exc.filename or exc} | hint: it belongs to another user (root?): "
                   "run as that user (e.g. with sudo), or set XEONCLUSTER_HOME to a folder you own", err=True)
        sys.exit(1)
    except Exception as exc:  # a bug still gets one line; --debug shows where
        if debug:
            raise
        click.echo(f"error: internal error: {type(exc).__name__}: {inert(str(exc))} | hint: rerun with --debug for the "
                   "traceback and report it", err=True)
        sys.exit(1)


