"""What a provider brings besides its spec: what builds it, what finds its clusters' leftovers without
state, the access documents its account needs, and its machine catalog.

Each is a typed callable, so mypy checks every provider's plugin against these signatures. A plugin
imports the config (its callables take one), which the spec cannot: config.py reads the specs. The
callables import their provider's heavy modules (a cloud SDK) only when called, so that listing the
plugins costs a command nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from xeoncluster.providers.base import Provider
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.spec import ProviderSpec
from xeoncluster.topology import CpuTopology

Events = Callable[[str], None]
# A cluster of the config's name found on this machine without its state, as the config keys that reach it.
Locate = Callable[[ClusterConfig], "dict[str, Any] | None"]
# (account, boundary) -> (the policy, or the permissions boundary, and one line on what to do with it).
AccessDocuments = Callable[[str, bool], "tuple[dict[str, Any], str]"]


@dataclass(frozen=True)
class Machine:
    """One of a provider's machine types, as its catalog describes it."""

    instance_type: str
    vcpus: int
    threads_per_core: int
    memory_gib: int
    topology: CpuTopology


class MachineCatalog(Protocol):
    """A provider's machine types, which also size pods on a Kubernetes cluster of its machines."""

    def machine(self, name: str) -> Machine | None: ...

    def nearest(self, name: str) -> str | None: ...

    def known_names(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class ProviderPlugin:
    spec: ProviderSpec
    make: Callable[[ClusterConfig, Events], Provider]
    locate: Locate | None = None      # only providers whose clusters live on this machine can answer
    access_documents: AccessDocuments | None = None  # None: its account needs no policy
    catalog: Callable[[], MachineCatalog] | None = None  # None: it has no machine types

    @property
    def name(self) -> str:
        return self.spec.name
