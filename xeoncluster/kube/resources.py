"""What one training pod takes of its node, and the CPUs the rank planner then sees."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from xeoncluster.core.errors import ConfigError
from xeoncluster.kube.machine import Machine
from xeoncluster.topology import CpuTopology

MIN_RESERVED_MEMORY_GIB = 2
RESERVED_MEMORY_SHARE = 0.10
MAX_SHM_GIB = 8


@dataclass(frozen=True)
class PodShare:
    """Requests and limits of the training container (equal: Guaranteed QoS), and the /dev/shm size."""

    cpus: int
    memory_gib: int
    shm_gib: int

    def quantities(self) -> dict[str, str]:
        return {"cpu": str(self.cpus), "memory": f"{self.memory_gib}Gi"}


def pod_share(node: Machine) -> PodShare:
    """One pod per node, requests == limits, and the rest of the node left to kubelet and the system.

    Requests equal to limits put the pod in the Guaranteed QoS class: it is the last to be evicted,
    and with the kubelet's static CPU manager an integer CPU count gets cores of its own, so the
    OpenMP threads are not time-sliced with other pods.

    CPU: every vCPU but one physical core (`threads_per_core` vCPUs, 2 on these types). EKS reserves
    about 0.1-0.3 vCPU for kubelet and the runtime (6% of the first core, then 1%, 0.5%, 0.25%), and
    the DaemonSets (VPC CNI, kube-proxy, CSI drivers) request a few hundred millicores more; a whole
    core covers both and keeps the pod on whole cores, which the static CPU manager hands out.

    Memory: 10% of the node, at least 2 GiB. EKS reserves 255 MiB plus 11 MiB per pod the node may
    hold (about 8.2 GiB for 737 pods on the largest sizes, 0.9 GiB on a 4-vCPU node) and evicts below
    100 MiB free; the rest covers the DaemonSets and the OS.

    /dev/shm is memory-backed, so its pages count inside the pod's memory limit: it gets a quarter of
    that limit, at most 8 GiB (gloo and the Trainer's in-process data loading need little of it).
    """
    cpus = node.vcpus - node.threads_per_core
    reserved = max(MIN_RESERVED_MEMORY_GIB, math.ceil(node.memory_gib * RESERVED_MEMORY_SHARE))
    memory = node.memory_gib - reserved
    if cpus < node.threads_per_core or memory < 1:
        raise ConfigError(f"--instance-type {node.instance_type}: {node.vcpus} vCPUs and {node.memory_gib} GiB leave "
                          "no room for a training pod after kubelet's share", hint="pick a larger instance type")
    return PodShare(cpus=cpus, memory_gib=memory, shm_gib=max(1, min(MAX_SHM_GIB, memory // 4)))


def pod_topology(node: Machine, share: PodShare) -> CpuTopology:
    """The node's topology confined to the pod's CPUs: what the rank planner plans threads for.

    Marked as restricted (fewer usable CPUs than the node has), as a probe inside the pod's cpuset
    would report it, so no CPU ids are named: the static CPU manager picks which cores the pod gets.
    """
    return replace(node.topology, usable_cpus=share.cpus)
