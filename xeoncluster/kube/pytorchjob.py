"""A Kubeflow PyTorchJob (`kubeflow.org/v1`, the Training Operator's legacy API), as the published
material runs it: workers only, torchrun with an elastic c10d rendezvous, restarted on failure.

A lost spot node: the operator recreates its pod (Karpenter brings a node), the surviving torchrun
agents restart their ranks and wait at the rendezvous for it, and every rank resumes from the newest
checkpoint on the PVC; up to --max-restarts times.
"""
from __future__ import annotations

from typing import Any

from xeoncluster.kube import pod
from xeoncluster.kube.job_spec import JobSpec

API_VERSION = "kubeflow.org/v1"
CONTAINER = "pytorch"  # the operator finds the training container, and adds its port, by this name
REPLICA_INDEX = "metadata.labels['training.kubeflow.org/replica-index']"
# Seconds the torchrun agents wait at the rendezvous for every node: a replacement spot node needs
# minutes to boot and pull the image, longer than torchrun's default of 600.
JOIN_TIMEOUT = "1800"


def container(spec: JobSpec) -> dict[str, Any]:
    return {"name": CONTAINER, "image": spec.image, "command": list(spec.command),
            "env": pod.env(spec, REPLICA_INDEX), "resources": pod.resources(spec),
            "volumeMounts": pod.volume_mounts(spec)}


def manifest(spec: JobSpec) -> dict[str, Any]:
    worker = {
        "replicas": spec.nodes,
        # The container restarts in place when its torchrun gives up (e.g. the rendezvous host was lost).
        "restartPolicy": "OnFailure",
        "template": {"spec": {**pod.placement(spec), "volumes": pod.volumes(spec), "containers": [container(spec)]}},
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "PyTorchJob",
        "metadata": {"name": spec.name, "labels": dict(pod.LABELS)},
        "spec": {
            "nprocPerNode": str(spec.ranks_per_node),
            # minReplicas == maxReplicas: a fixed world size, so a resumed run keeps its batch size and
            # the elastic rendezvous serves only to restart the ranks around a replaced node.
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": spec.nodes, "maxReplicas": spec.nodes,
                              "maxRestarts": spec.max_restarts,
                              "rdzvConf": [{"key": "join_timeout", "value": JOIN_TIMEOUT}]},
            # The operator requires runPolicy. A lost node can restart every other pod's container once
            # (when it held the rendezvous), so the pods may restart max-restarts x nodes times in all.
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": spec.max_restarts * spec.nodes},
            "pytorchReplicaSpecs": {"Worker": worker},
        },
    }
