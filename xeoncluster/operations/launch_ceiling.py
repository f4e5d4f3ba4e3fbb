"""How many instances the run agent may have running for its cluster: the cluster's size plus the
replacements under way (a noticed node still running beside its successor).

IAM cannot count: the cluster's role may launch any number of the cluster's instance types, and code
on any node (the user's script, any package it installs) holds the same credentials. The agent
holds itself to this ceiling, so that neither a bug nor a retry loop of ours runs the bill up; what
limits other code on the nodes is docs/aws.md's to say (the account's vCPU quota, `down` by tag).
"""
from __future__ import annotations

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import ProviderError


def check_ceiling(ctx: CommandContext, record: ClusterRecord, launching: int, replacing: int = 0,
                  size: int | None = None) -> None:
    """Refuse (one line, nothing launched) when `launching` more would take the cluster above its size
    (`size`, else the recorded one) plus the `replacing` nodes still running beside their successors."""
    ceiling = (size if size is not None else int(record.config.get("nodes", len(record.nodes)))) + replacing
    running = len(ctx.provider.nodes(ctx.config, priced=False))
    if running + launching > ceiling:
        raise ProviderError(
            f"not launching {launching} more instance(s) for cluster {ctx.config.name}: it has {running} running, "
            f"and its size {ceiling - replacing} plus {replacing} replacement(s) under way allows {ceiling}",
            hint="an instance of the cluster that it does not record is running (`xeoncluster status` names the "
                 "nodes; `xeoncluster down` removes every instance of the cluster)")
