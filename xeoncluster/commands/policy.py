"""`xeoncluster policy`: the access documents a provider's account needs, ready to paste (on AWS: the
policy of the identity that runs xeoncluster, or the permissions boundary an administrator creates once)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.abilities import account_id
from xeoncluster.providers.plugin import AccessDocuments
from xeoncluster.providers.plugins import plugins


@dataclass(frozen=True)
class PrintedPolicy:
    account: str
    document: dict[str, Any]
    how: str  # one line: what to do with the document


@dataclass(frozen=True)
class PolicyProvider:
    name: str
    documents: AccessDocuments


def policy_provider(chosen: str | None) -> PolicyProvider:
    """The provider whose documents to print: the one named, else the only one that has any."""
    having = [PolicyProvider(name, plugin.access_documents) for name, plugin in plugins().items()
              if plugin.access_documents]
    if chosen is not None:
        having = [provider for provider in having if provider.name == chosen]
    if len(having) != 1:
        names = ", ".join(name for name, plugin in plugins().items() if plugin.access_documents)
        raise ConfigError(f"provider {chosen} needs no access policy", hint=f"policies exist for: {names}")
    return having[0]


def policy(provider: PolicyProvider, ctx: CommandContext | None, account: str | None,
           boundary: bool) -> PrintedPolicy:
    """For `account`, else the caller's (the context's provider asks who it is)."""
    if account is None:
        if ctx is None:
            raise ConfigError("no account to print the policy for", hint="pass --account ID")
        account = account_id(ctx.provider)
    document, how = provider.documents(account, boundary)
    return PrintedPolicy(account, document, how)
