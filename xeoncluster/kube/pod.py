"""The container and pod fragments a TrainJob and a PyTorchJob share."""
from __future__ import annotations

from typing import Any

from xeoncluster.kube.job_spec import JobSpec
from xeoncluster.kube.launch import EnvVar
from xeoncluster.kube.pod_paths import NODE_INDEX

SHM_VOLUME = "dshm"
DATA_VOLUME = "data"
LABELS = {"app.kubernetes.io/managed-by": "xeoncluster"}


def env(spec: JobSpec, node_index_field: str) -> list[dict[str, Any]]:
    """The job's env, after the pod's index on its node list (`node_index_field`, set by the operator)."""
    return [EnvVar(NODE_INDEX, field_path=node_index_field).to_dict(), *(var.to_dict() for var in spec.env)]


def resources(spec: JobSpec) -> dict[str, dict[str, str]]:
    return {"requests": spec.share.quantities(), "limits": spec.share.quantities()}


def volumes(spec: JobSpec) -> list[dict[str, Any]]:
    return [
        # Docker's default /dev/shm is 64 MiB; a memory-backed emptyDir lifts that (within the memory limit).
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.share.shm_gib}Gi"}},
        {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": spec.pvc}},
    ]


def volume_mounts(spec: JobSpec) -> list[dict[str, str]]:
    return [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}, {"name": DATA_VOLUME, "mountPath": spec.paths.mount}]


def placement(spec: JobSpec) -> dict[str, Any]:
    """nodeSelector and, on spot, the toleration: the pod-level half of where the job may run."""
    fragment: dict[str, Any] = {"nodeSelector": spec.placement.node_selector()}
    tolerations = spec.placement.tolerations()
    if tolerations:
        fragment["tolerations"] = tolerations
    return fragment
