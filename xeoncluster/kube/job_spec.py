"""What `export` was asked for, checked, and the job's values that both manifests are built from."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import Stack
from xeoncluster.job.script_plan import check_script_request
from xeoncluster.job.train_plan import check_request, default_run_name
from xeoncluster.job.train_request import AnyRequest, ScriptRequest, TaskRequest
from xeoncluster.job.workdir import Workdir
from xeoncluster.kube.launch import EnvVar, container_command, plan, plan_notes, pod_env, worker_program
from xeoncluster.kube.machine import Machine, machine
from xeoncluster.kube.pod_paths import DataPaths
from xeoncluster.kube.resources import PodShare, pod_share, pod_topology
from xeoncluster.kube.script_job import default_image, script_program, stack_image
from xeoncluster.providers.node_kinds import Market

KINDS = ("trainjob", "pytorchjob")
MARKETS = (Market.SPOT.value, Market.ON_DEMAND.value)  # Karpenter's capacity types share their names
DEFAULT_PVC = "xeoncluster-data"
MAX_NODES = 256
# A DNS label, short enough that the operators' pod, service and host names built from it
# (NAME-node-0-K, NAME-worker-K) stay within Kubernetes' 63 characters.
JOB_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")
PVC_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
CAPACITY_TYPE = "karpenter.sh/capacity-type"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"


@dataclass(frozen=True)
class ExportRequest:
    kind: str
    train: AnyRequest
    nodes: int
    instance_type: str
    image: str | None  # None: the stack's image, or for a script one named after it and its workdir
    pvc: str = DEFAULT_PVC
    market: str = Market.SPOT.value


@dataclass(frozen=True)
class Placement:
    """Which nodes the pods may land on: the instance type, and spot or on-demand capacity."""

    instance_type: str
    market: str

    def node_selector(self) -> dict[str, str]:
        # Karpenter labels its nodes with the capacity type; pinning it keeps an on-demand job off spot too.
        return {INSTANCE_TYPE: self.instance_type, CAPACITY_TYPE: self.market}

    def tolerations(self) -> list[dict[str, str]]:
        if self.market != Market.SPOT:
            return []
        # Clusters often taint spot nodes so that only workloads that accept losing a node land there.
        return [{"key": CAPACITY_TYPE, "operator": "Equal", "value": Market.SPOT.value, "effect": "NoSchedule"}]


@dataclass(frozen=True)
class JobSpec:
    """Every value a manifest needs; the builders only arrange them into their kind's shape."""

    name: str
    nodes: int
    ranks_per_node: int
    threads_per_rank: int
    image: str
    command: tuple[str, ...]
    env: tuple[EnvVar, ...]
    machine: Machine
    share: PodShare
    placement: Placement
    pvc: str
    paths: DataPaths
    max_restarts: int
    stack: str
    notes: tuple[str, ...] = ()
    workdir: Workdir | None = None  # a script's: what its image holds

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


def check_export(request: ExportRequest, stack: Stack) -> None:
    """Bad input is one line (exit 2) before anything is built."""
    if request.kind not in KINDS:
        raise ConfigError(f"unknown manifest kind {request.kind!r}; choose one of {', '.join(KINDS)}")
    if not 1 <= request.nodes <= MAX_NODES:
        raise ConfigError(f"--nodes must be between 1 and {MAX_NODES} (got {request.nodes})")
    if request.market not in MARKETS:
        raise ConfigError(f"--market {request.market!r}: choose one of {', '.join(MARKETS)}")
    if not PVC_NAME.fullmatch(request.pvc):
        raise ConfigError(f"--pvc {request.pvc!r}: a PersistentVolumeClaim name is lowercase letters, digits, "
                          "'-' and '.'", hint=f"e.g. --pvc {DEFAULT_PVC}")
    if request.image is not None and (not request.image or any(c.isspace() for c in request.image)):
        raise ConfigError(f"--image {request.image!r}: expected an image reference such as "
                          "registry.example.com/xeoncluster:stock")
    check_request(request.train, stack)
    if request.train.run is not None and not JOB_NAME.fullmatch(request.train.run):
        raise ConfigError(f"--run {request.train.run!r}: the job is named after the run, so it must be 1-40 "
                          "lowercase letters, digits or '-', starting and ending with a letter or digit",
                          hint="e.g. --run squad-lr5e-5")
    files = (("--train-file", request.train.train_file), ("--eval-file", request.train.eval_file)) \
        if isinstance(request.train, TaskRequest) else ()
    for flag, path in files:
        if path is not None and not PurePosixPath(path).is_absolute():
            raise ConfigError(f"{flag} {str(path)!r}: give the file's absolute path inside the pod, e.g. on the "
                              "PVC (/data/...)")


def job_name(request: AnyRequest) -> str:
    """The default run name, made a valid job name (a script's may hold '_' or capitals)."""
    return re.sub(r"[^a-z0-9-]+", "-", default_run_name(request).lower())[-40:].strip("-")


def build_job_spec(request: ExportRequest, stack: Stack) -> JobSpec:
    check_export(request, stack)
    node = machine(request.instance_type)
    share = pod_share(node)
    ranks = plan(request.train, stack, pod_topology(node, share), request.nodes)
    paths = DataPaths(request.train.run or job_name(request.train))
    workdir = None
    if isinstance(request.train, ScriptRequest):
        workdir = check_script_request(request.train)
        program = script_program(request.train, paths, workdir)
        image = request.image or default_image(request.train, workdir)
    else:
        program = worker_program(request.train, stack, paths)
        image = request.image or stack_image(stack)
    share_note = (f"each pod: {share.cpus} of {node.vcpus} vCPUs and {share.memory_gib} of {node.memory_gib} GiB "
                  "(requests == limits; the rest is left to kubelet and the system)")
    return JobSpec(
        name=paths.run, nodes=request.nodes, ranks_per_node=ranks.ranks_per_node,
        threads_per_rank=ranks.threads_per_rank, image=image,
        command=container_command(program, ranks.ranks_per_node),
        env=pod_env(request.train, stack, ranks, paths), machine=node, share=share,
        placement=Placement(node.instance_type, request.market), pvc=request.pvc, paths=paths,
        max_restarts=request.train.max_restarts, stack=stack.name, notes=(share_note, *plan_notes(ranks)),
        workdir=workdir)
