"""`xeoncluster export`: both manifests for 4 c7i.16xlarge nodes pass the official Kubeflow models with no
field they don't know, and carry the planner's numbers, the resources rule, volumes, placement and
restart settings."""
from __future__ import annotations

import copy
from typing import Any

import kubeflow_trainer_api.models as trainer_models
import pytest
from kubeflow.training.api_client import ApiClient

from xeoncluster.core.stacks import get_stack
from xeoncluster.job.train_plan import dry_run_plan
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.kube.export import Export, export
from xeoncluster.kube.job_spec import ExportRequest
from xeoncluster.kube.machine import machine
from xeoncluster.kube.resources import pod_share, pod_topology
from xeoncluster.providers.aws import catalog as aws_catalog
from xeoncluster.topology import plan_ranks

IMAGE = "registry.example.com/xeoncluster-training:stock"


def exported(kind: str, nodes: int = 4, instance_type: str = "c7i.16xlarge", market: str = "spot",
             **train: Any) -> Export:
    request = TaskRequest(**{"task": "squad", "run": "squad-k8s", **train})
    return export(ExportRequest(kind, request, nodes, instance_type, IMAGE, "team-data", market), get_stack("stock"))


def trainjob_docs(**kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    runtime, job = exported("trainjob", **kwargs).documents
    return runtime, job


def pytorchjob_doc(**kwargs: Any) -> dict[str, Any]:
    (job,) = exported("pytorchjob", **kwargs).documents
    return job


def trainjob_round_trip(runtime: dict[str, Any], job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The models ignore unknown keys; what they keep, compared with the input, shows any they dropped."""
    return (trainer_models.TrainerV1alpha1TrainingRuntime.from_dict(runtime).to_dict(),
            trainer_models.TrainerV1alpha1TrainJob.from_dict(job).to_dict())


def pytorchjob_round_trip(job: dict[str, Any]) -> dict[str, Any]:
    client = ApiClient()
    model = client._ApiClient__deserialize(job, "KubeflowOrgV1PyTorchJob")  # no public from-dict in this client
    assert model.spec.run_policy is not None
    result: dict[str, Any] = client.sanitize_for_serialization(model)
    return result


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_trainjob_for_four_c7i_16xlarge_round_trips_through_trainer_api_models() -> None:
    runtime, job = trainjob_docs()
    assert (runtime["kind"], job["kind"]) == ("TrainingRuntime", "TrainJob")
    assert trainjob_round_trip(runtime, job) == (runtime, job)
    model = trainer_models.TrainerV1alpha1TrainJob.from_dict(job)
    assert model.spec.trainer.num_nodes == 4 and model.spec.trainer.num_proc_per_node == 1
    assert model.spec.runtime_ref.name == runtime["metadata"]["name"] == "squad-k8s"
    assert model.spec.runtime_ref.kind == "TrainingRuntime"


def test_pytorchjob_for_four_c7i_16xlarge_round_trips_through_training_models() -> None:
    job = pytorchjob_doc()
    assert pytorchjob_round_trip(job) == job
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4 and job["spec"]["nprocPerNode"] == "1"
    assert worker["template"]["spec"]["containers"][0]["name"] == "pytorch"


@pytest.mark.parametrize("path", [
    ("spec", "trainer", "resourcesPerNode"),
    ("spec", "runtimePatches", 0, "trainingRuntimeSpec", "template", "spec", "replicatedJobs", 0, "template",
     "spec", "template", "spec", "nodeSelector"),
])
def test_the_trainjob_round_trip_catches_a_misspelled_key(path: tuple[Any, ...]) -> None:
    runtime, job = trainjob_docs()
    broken = misspell(job, path)
    assert trainjob_round_trip(runtime, broken)[1] != broken


def test_the_pytorchjob_round_trip_catches_a_misspelled_key() -> None:
    job = misspell(pytorchjob_doc(), ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 0,
                                      "volumeMounts"))
    assert pytorchjob_round_trip(job) != job


def misspell(doc: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    broken = copy.deepcopy(doc)
    parent = broken
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1] + "x"] = parent.pop(path[-1])
    return broken


def test_ranks_threads_and_preload_come_from_the_train_planner_over_the_pod_s_cpus() -> None:
    _, job = trainjob_docs()
    env = env_of(job["spec"]["trainer"])
    node = machine("c7i.16xlarge")
    ranks = plan_ranks(pod_topology(node, pod_share(node)), 4, backend="gloo", ipex=False, master_addr="x")
    assert env["OMP_NUM_THREADS"] == str(ranks.threads_per_rank) == "31"
    assert (env["OMP_PROC_BIND"], env["OMP_PLACES"]) == ("close", "cores")
    assert env["LD_PRELOAD"] == aws_catalog.DEFAULT_TCMALLOC
    # The EC2 path plans the whole node: one thread more, the core the pod leaves to kubelet.
    ec2 = dry_run_plan(TaskRequest(task="squad"), get_stack("stock"), node.topology, "c7i.16xlarge", 4, "ubuntu")
    assert ec2.ranks.threads_per_rank == 32 and ec2.ranks.ranks_per_node == 1
    # torchrun sets the rendezvous; Intel MPI pinning means nothing without mpiexec.
    assert not {"MASTER_ADDR", "MASTER_PORT"} & set(env)
    assert not [name for name in env if name.startswith("I_MPI_")]


def test_both_kinds_run_the_same_command_and_env_but_the_node_index_field() -> None:
    _, trainjob = trainjob_docs()
    container = pytorchjob_doc()["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    trainer = trainjob["spec"]["trainer"]
    assert container["command"] == trainer["command"]
    assert container["env"][1:] == trainer["env"][1:]
    assert trainer["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']")
    assert container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['training.kubeflow.org/replica-index']")


def test_requests_equal_limits_and_leave_a_core_and_memory_to_kubelet() -> None:
    _, job = trainjob_docs()
    resources = job["spec"]["trainer"]["resourcesPerNode"]
    assert resources["requests"] == resources["limits"] == {"cpu": "62", "memory": "115Gi"}
    shares = {kind: pod_share(machine(kind)) for kind in ("c7i.xlarge", "c7i.16xlarge", "c7i.48xlarge")}
    assert [(s.cpus, s.memory_gib, s.shm_gib) for s in shares.values()] == [(2, 6, 1), (62, 115, 8), (190, 345, 8)]


def test_a_two_socket_type_runs_two_ranks_per_pod_without_thread_binding() -> None:
    _, job = trainjob_docs(instance_type="c7i.48xlarge")
    trainer = job["spec"]["trainer"]
    env = env_of(trainer)
    assert trainer["numProcPerNode"] == 2 and trainer["command"][:3] == ["torchrun", "--nproc-per-node", "2"]
    assert env["OMP_NUM_THREADS"] == "47"  # 95 cores of the pod, 47 per socket-sized rank
    assert not {"OMP_PROC_BIND", "OMP_PLACES", "KMP_AFFINITY"} & set(env)


def test_spot_selects_spot_nodes_and_tolerates_their_taint() -> None:
    pod = pytorchjob_doc()["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "c7i.16xlarge",
                                   "karpenter.sh/capacity-type": "spot"}
    assert pod["tolerations"] == [{"key": "karpenter.sh/capacity-type", "operator": "Equal", "value": "spot",
                                   "effect": "NoSchedule"}]
    on_demand = pytorchjob_doc(market="on-demand")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert on_demand["nodeSelector"]["karpenter.sh/capacity-type"] == "on-demand"
    assert "tolerations" not in on_demand


def test_shm_in_memory_and_the_pvc_for_data_outputs_and_hf_caches() -> None:
    _, job = trainjob_docs()
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod = patch["template"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                              {"name": "data", "persistentVolumeClaim": {"claimName": "team-data"}}]
    assert pod["containers"] == [{"name": "node", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                                                                     {"name": "data", "mountPath": "/data"}]}]
    env = env_of(job["spec"]["trainer"])
    assert env["HF_HOME"] == "/data/hf-home"
    command = job["spec"]["trainer"]["command"]
    assert command[command.index("--output-dir") + 1] == "/data/runs/squad-k8s/node-$(XC_NODE_INDEX)"
    assert command[command.index("--cache-dir") + 1] == "/data/cache/features"


def test_a_lost_node_restarts_the_pods_up_to_max_restarts() -> None:
    runtime, _ = trainjob_docs(max_restarts=5)
    jobset = runtime["spec"]["template"]["spec"]
    node_job = jobset["replicatedJobs"][0]["template"]
    assert jobset["failurePolicy"] == {"maxRestarts": 5}
    assert node_job["spec"]["backoffLimit"] == 0
    assert node_job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert node_job["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    spec = pytorchjob_doc(max_restarts=5)["spec"]
    assert spec["elasticPolicy"]["rdzvBackend"] == "c10d"
    assert (spec["elasticPolicy"]["minReplicas"], spec["elasticPolicy"]["maxReplicas"]) == (4, 4)
    assert spec["elasticPolicy"]["maxRestarts"] == 5
    assert spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    assert spec["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 20}


def test_the_command_is_torchrun_over_python_m_training_resuming_from_its_checkpoints() -> None:
    _, job = trainjob_docs(task="glue", glue_task="rte", train_file="/data/rte/train.tsv",
                           model="/data/models/bert", trainer_args=("--epochs", "2"))
    assert job["spec"]["trainer"]["command"] == [
        "torchrun", "--nproc-per-node", "1", "--no-python", "python", "-m", "xeoncluster.node", "glue", "--task", "rte",
        "--train-file", "/data/rte/train.tsv", "--model", "/data/models/bert",
        "--output-dir", "/data/runs/squad-k8s/node-$(XC_NODE_INDEX)", "--cache-dir", "/data/cache/features",
        "--stack", "stock", "--resume", "--epochs", "2"]


def test_no_tune_drops_threads_binding_and_tcmalloc() -> None:
    _, job = trainjob_docs(tuned=False, env=(("KMP_BLOCKTIME", "0"),))
    env = env_of(job["spec"]["trainer"])
    assert not {"OMP_NUM_THREADS", "OMP_PROC_BIND", "LD_PRELOAD"} & set(env)
    assert env["KMP_BLOCKTIME"] == "0"

