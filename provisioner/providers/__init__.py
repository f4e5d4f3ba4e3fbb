"""Provider construction: one place that maps `provider:` to a class."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import ClusterConfig
    from .base import Provider


def make_provider(cluster: ClusterConfig, events: Callable[[str], None]) -> Provider:
    if cluster.provider == "local":
        from .local import LocalProvider

        return LocalProvider(cluster.local.root, events=events)
    from .aws import AwsProvider

    return AwsProvider(region=cluster.region or "us-east-1", profile=cluster.profile, events=events)
