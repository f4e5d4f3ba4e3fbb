"""`xeoncluster policy`: print the access policy (or the permissions boundary) a provider's account needs."""
from __future__ import annotations

from typing import Any

import click

from xeoncluster.cli import render
from xeoncluster.cli.group import CONTEXT, cli, cluster_options, command_context
from xeoncluster.commands import policy as policy_cmd


@cli.command(context_settings=CONTEXT)
@cluster_options
@click.option("--boundary", is_flag=True,
              help="print the permissions boundary every role xeoncluster creates carries (an administrator "
                   "creates it once per account), not your own policy")
@click.option("--account", metavar="ID", help="the account id (default: your credentials' account)")
@click.pass_context
def policy(ctx: click.Context, boundary: bool, account: str | None, **opts: Any) -> None:
    """Print the IAM policy xeoncluster needs on AWS, as JSON ready to paste; what to do with it goes
    to stderr.

    \b
    xeoncluster policy              the policy of the identity that runs xeoncluster
    xeoncluster policy --boundary   the permissions boundary xeoncluster-boundary, and the aws CLI
                                    command that creates it
    """
    chosen = opts.get("provider") or (ctx.find_root().obj or {}).get("globals", {}).get("provider")
    provider = policy_cmd.policy_provider(chosen)
    context = None if account is not None else command_context(ctx, opts, {"provider": provider.name})
    printed = policy_cmd.policy(provider, context, account, boundary)
    render.as_json(printed.document)
    click.echo(f"# {printed.how}", err=True)
