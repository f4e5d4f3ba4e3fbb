"""A Kubeflow Trainer v2 TrainJob, and the TrainingRuntime that gives it its restart settings.

A TrainJob can set the trainer's image, command, env, node count and resources, and patch the pods'
placement and volumes (runtimePatches), but not how failures restart: that belongs to its runtime.
So the export carries a runtime of its own, named after the job: a JobSet whose node Job fails on
the first failed pod (a lost spot node) and whose failure policy then recreates every node's pod,
up to --max-restarts times; the ranks resume from the newest checkpoint on the PVC.
"""
from __future__ import annotations

from typing import Any

from xeoncluster.kube import pod
from xeoncluster.kube.job_spec import JobSpec

API_GROUP = "trainer.kubeflow.org"
API_VERSION = f"{API_GROUP}/v1alpha1"
# The Trainer's torch plugin fills in the container named `node` of the replicated job that carries
# this label: the PET_* variables torchrun reads, and the TrainJob's trainer fields.
ANCESTOR_LABEL = f"{API_GROUP}/trainjob-ancestor-step"
NODE = "node"
# Indexed Jobs annotate each pod with its index; it is also the node rank the plugin gives torchrun.
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
PATCH_MANAGER = "xeoncluster.io/export"


def training_runtime(spec: JobSpec) -> dict[str, Any]:
    node_job = {
        "name": NODE,
        "template": {
            "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            # One failed pod fails the Job at once, instead of the other ranks waiting out their
            # collective timeout for a replacement.
            "spec": {"backoffLimit": 0,
                     "template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": NODE, "image": spec.image}]}}},
        },
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainingRuntime",
        "metadata": {"name": spec.name, "labels": {f"{API_GROUP}/framework": "torch", **pod.LABELS}},
        "spec": {
            "mlPolicy": {"numNodes": spec.nodes, "torch": {}},
            "template": {"spec": {"failurePolicy": {"maxRestarts": spec.max_restarts},
                                  "replicatedJobs": [node_job]}},
        },
    }


def train_job(spec: JobSpec) -> dict[str, Any]:
    pod_patch = {**pod.placement(spec), "volumes": pod.volumes(spec),
                 "containers": [{"name": NODE, "volumeMounts": pod.volume_mounts(spec)}]}
    replicated = {"name": NODE, "template": {"spec": {"template": {"spec": pod_patch}}}}
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": spec.name, "labels": dict(pod.LABELS)},
        "spec": {
            "runtimeRef": {"name": spec.name, "apiGroup": API_GROUP, "kind": "TrainingRuntime"},
            "trainer": {
                "image": spec.image,
                "command": list(spec.command),
                "env": pod.env(spec, COMPLETION_INDEX),
                "numNodes": spec.nodes,
                "numProcPerNode": spec.ranks_per_node,
                "resourcesPerNode": pod.resources(spec),
            },
            "runtimePatches": [{"manager": PATCH_MANAGER,
                                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated]}}}}],
        },
    }


def manifests(spec: JobSpec) -> list[dict[str, Any]]:
    """The runtime first: `kubectl apply -f` creates it before the TrainJob that references it."""
    return [training_runtime(spec), train_job(spec)]
