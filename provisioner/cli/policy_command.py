"""`xeoncluster policy`: print the IAM policy (or the permissions boundary) for an AWS account."""
from __future__ import annotations

from typing import Any

import click

from .. import render
from ..commands import policy as policy_cmd
from .group import CONTEXT, cli, cluster_options, command_context


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.option("--boundary", is_flag=True,
              help="print the permissions boundary every role xeoncluster creates carries (an administrator "
                   "creates it once per account), not your own policy")
@click.option("--account", metavar="ID", help="AWS account id (default: your credentials' account)")
@click.pass_context
def policy(ctx: click.Context, boundary: bool, account: str | None, **opts: Any) -> None:
    """Print the IAM policy xeoncluster needs on AWS, as JSON ready to paste; what to do with it goes
    to stderr.

    \b
    xeoncluster policy              the policy of the identity that runs xeoncluster
    xeoncluster policy --boundary   the permissions boundary xeoncluster-boundary, and the aws CLI
                                    command that creates it
    """
    context = None if account is not None else command_context(ctx, opts, {"provider": "aws"})
    printed = policy_cmd.policy(context, account, boundary)
    render.as_json(printed.document)
    click.echo(f"# {printed.how}", err=True)
