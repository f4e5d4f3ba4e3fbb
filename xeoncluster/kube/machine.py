"""The instance type a job's pods run on, from the EC2 catalog the `train --dry-run` path uses.

On EKS a node is an EC2 instance, and `node.kubernetes.io/instance-type` carries its EC2 name, so the
same catalog (cores, sockets, memory, tcmalloc path) sizes the pods.
"""
from __future__ import annotations

from dataclasses import dataclass

from xeoncluster.errors import ConfigError
from xeoncluster.providers.aws import catalog as aws_catalog
from xeoncluster.topology import CpuTopology


@dataclass(frozen=True)
class Machine:
    """One node of the job's instance type, as the catalog describes it."""

    instance_type: str
    vcpus: int
    threads_per_core: int
    memory_gib: int
    topology: CpuTopology


def machine(instance_type: str) -> Machine:
    """The catalog's facts for `instance_type`; an unknown name is bad input, with the nearest known one."""
    kind = aws_catalog.lookup(instance_type)
    if kind is None:
        unknown = f"--instance-type {instance_type!r}: not in the instance catalog"
        near = aws_catalog.nearest(instance_type)
        if near:
            raise ConfigError(f"{unknown} (did you mean '{near}'?)")
        raise ConfigError(unknown, hint="known types: " + ", ".join(aws_catalog.known_names()))
    return Machine(kind.name, kind.vcpus, kind.threads_per_core, kind.memory_gib, aws_catalog.topology_of(kind))
