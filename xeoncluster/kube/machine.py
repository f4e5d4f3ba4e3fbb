"""The instance type a job's pods run on, from the machine catalog the `train --dry-run` path uses.

On a managed Kubernetes cluster a node is one of the cloud's machines, and `node.kubernetes.io/instance-type`
carries its name there, so that provider's catalog (cores, sockets, memory, tcmalloc path) sizes the pods.
"""
from __future__ import annotations

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.plugin import Machine, MachineCatalog
from xeoncluster.providers.plugins import plugin_for
from xeoncluster.providers.registry import DEFAULT_PROVIDER, spec_for


def catalog(provider: str = DEFAULT_PROVIDER) -> MachineCatalog:
    """The provider's machine catalog; the default provider's for one with no machine types."""
    found = plugin_for(provider).catalog or plugin_for(DEFAULT_PROVIDER).catalog
    assert found is not None, "the default provider has a machine catalog"
    return found()


def configured(config: ClusterConfig) -> tuple[str, str]:
    """The instance type and market the config's provider asks for; the default provider's for one with
    no machine types (a local cluster exported to a cloud's Kubernetes)."""
    spec = spec_for(config.provider)
    if spec.machine_of is None:
        spec = spec_for(DEFAULT_PROVIDER)
    assert spec.machine_of is not None
    return spec.machine_of(getattr(config, spec.name))


def machine(instance_type: str, provider: str = DEFAULT_PROVIDER) -> Machine:
    """The catalog's facts for `instance_type`; an unknown name is bad input, with the nearest known one."""
    known = catalog(provider)
    found = known.machine(instance_type)
    if found is None:
        unknown = f"--instance-type {instance_type!r}: not in the instance catalog"
        near = known.nearest(instance_type)
        if near:
            raise ConfigError(f"{unknown} (did you mean '{near}'?)")
        raise ConfigError(unknown, hint="known types: " + ", ".join(known.known_names()))
    return found
