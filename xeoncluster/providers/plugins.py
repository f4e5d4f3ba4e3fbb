"""Every provider's plugin, by name: the one list besides registry.specs() that a new provider joins."""
from __future__ import annotations

from xeoncluster.providers.aws.plugin import AWS_PLUGIN
from xeoncluster.providers.local.plugin import LOCAL_PLUGIN
from xeoncluster.providers.plugin import ProviderPlugin


def plugins() -> dict[str, ProviderPlugin]:
    return {plugin.name: plugin for plugin in (AWS_PLUGIN, LOCAL_PLUGIN)}


def plugin_for(name: str) -> ProviderPlugin:
    return plugins()[name]
