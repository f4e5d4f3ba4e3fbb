"""The run agent's command context, built from its own home on the host it runs on: the config the
cluster was created with, its state (nodes, pinned host keys, the key), the provider and a reporter
that writes plain lines to the agent's log."""
from __future__ import annotations

import sys

from xeoncluster.cluster.command_context import CommandContext, make_context
from xeoncluster.cluster.state import StateDir
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.core.progress import Reporter
from xeoncluster.providers.abilities import HasOwners
from xeoncluster.providers.config import load_config


def agent_context(cluster: str) -> CommandContext:
    state = StateDir(cluster)
    record = state.load()
    if record is None:
        raise XeonClusterError(f"no state for cluster '{cluster}' in {state.path}")
    ctx = make_context(load_config(None, record.config))
    # What the agent launches belongs to the user who made the cluster, not to the master's role (a
    # cluster made before owners were recorded has none, and its launches carry no owner tag).
    if isinstance(ctx.provider, HasOwners):
        ctx.provider.act_for(record.owner or "")
    ctx.reporter = Reporter(stream=sys.stderr, fancy=False)
    return ctx
