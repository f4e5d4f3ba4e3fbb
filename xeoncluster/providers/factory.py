"""Provider construction: the spec of `provider:` names what builds it, and what finds its leftovers."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from xeoncluster.providers.base import Provider
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.registry import spec_for, specs


def _resolve(reference: str) -> Callable[..., Any]:
    module, _, function = reference.partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), function)
    return found


def make_provider(cluster: ClusterConfig, events: Callable[[str], None]) -> Provider:
    built: Provider = _resolve(spec_for(cluster.provider).factory)(cluster, events)
    return built


def locate_without_state(config: ClusterConfig) -> dict[str, Any] | None:
    """Config overrides that reach a cluster this machine still holds although its state is gone."""
    for spec in specs().values():
        found: dict[str, Any] | None = _resolve(spec.locate)(config) if spec.locate else None
        if found is not None:
            return found
    return None
