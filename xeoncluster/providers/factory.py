"""Provider construction: the plugin of `provider:` builds it, and each plugin may find leftovers."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xeoncluster.providers.base import Provider
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.plugins import plugin_for, plugins


def make_provider(cluster: ClusterConfig, events: Callable[[str], None]) -> Provider:
    return plugin_for(cluster.provider).make(cluster, events)


def locate_without_state(config: ClusterConfig) -> dict[str, Any] | None:
    """Config overrides that reach a cluster this machine still holds although its state is gone."""
    for plugin in plugins().values():
        found = plugin.locate(config) if plugin.locate else None
        if found is not None:
            return found
    return None
