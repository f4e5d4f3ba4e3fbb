"""Provider construction: the spec of `provider:` says which class builds it."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from xeoncluster.providers.spec import spec_for

if TYPE_CHECKING:
    from xeoncluster.config import ClusterConfig
    from xeoncluster.providers.base import Provider


def make_provider(cluster: ClusterConfig, events: Callable[[str], None]) -> Provider:
    return spec_for(cluster.provider).make(cluster, events)
