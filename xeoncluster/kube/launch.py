"""What every pod runs: torchrun, the program each rank runs, and the environment the planner computes."""
from __future__ import annotations

from dataclasses import dataclass

from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import Stack
from xeoncluster.job.train_plan import DEFAULT_DATASETS, DEFAULT_MODEL, untuned
from xeoncluster.job.train_request import TaskRequest, TrainRequest
from xeoncluster.kube.pod_paths import PACKAGE_ROOT, DataPaths
from xeoncluster.node.rank_env import XC_STACK
from xeoncluster.topology import CpuTopology, RankPlan, plan_ranks

# plan_ranks wants the master's address for MASTER_ADDR; torchrun sets MASTER_ADDR/MASTER_PORT for
# its ranks itself (from the operator's PET_* variables), so neither reaches the pod's env.
RENDEZVOUS_BY_TORCHRUN = ("MASTER_ADDR", "MASTER_PORT")
# Intel MPI's pinning (I_MPI_PIN*) means nothing without mpiexec.
MPI_ONLY_PREFIX = "I_MPI_"
# Binding every rank's threads to "the cores" of the pod: right for one rank per pod; with several,
# each rank would bind to the same first cores, as torchrun gives no rank a CPU set of its own.
THREAD_BINDING = ("OMP_PROC_BIND", "OMP_PLACES", "KMP_AFFINITY")


@dataclass(frozen=True)
class EnvVar:
    """A container env entry: a value, or a field of the pod (Kubernetes' downward API)."""

    name: str
    value: str | None = None
    field_path: str | None = None

    def to_dict(self) -> dict[str, object]:
        if self.field_path is not None:
            return {"name": self.name, "valueFrom": {"fieldRef": {"fieldPath": self.field_path}}}
        return {"name": self.name, "value": self.value or ""}


def worker_program(request: TaskRequest, stack: Stack, paths: DataPaths) -> tuple[str, ...]:
    """The argv each rank runs; torchrun starts it once per rank (`--no-python`: it is a whole command).

    A user's script has its own (script_job.py) and keeps everything else, env, torchrun and the
    pod, as it is. `--resume` is always on:
    a restarted pod continues from the newest checkpoint in its folder, or starts fresh without one.
    """
    args = ["python", "-m", "xeoncluster.node", request.task]
    if request.task == "glue":
        args += ["--task", request.glue_task]
    if request.demo:
        args += ["--demo", paths.demo]
    elif request.train_file:
        args += ["--train-file", str(request.train_file)]
        if request.eval_file:
            args += ["--eval-file", str(request.eval_file)]
    else:
        args += ["--dataset", request.dataset or DEFAULT_DATASETS[request.task]]
    if not request.demo:
        args += ["--model", request.model or DEFAULT_MODEL]
    args += ["--output-dir", paths.output_dir, "--cache-dir", paths.features_cache, "--stack", stack.name, "--resume"]
    return (*args, *request.trainer_args)


def container_command(program: tuple[str, ...], ranks_per_node: int) -> tuple[str, ...]:
    """torchrun over `program`. The node count, node rank and rendezvous come from the PET_* variables
    the operator injects; the ranks per node are named here too, because a PyTorchJob with an
    elasticPolicy injects PET_NPROC_PER_NODE only from a deprecated field."""
    return ("torchrun", "--nproc-per-node", str(ranks_per_node), "--no-python", *program)


def plan(request: TrainRequest, stack: Stack, topology: CpuTopology, nodes: int) -> RankPlan:
    """The planner `train` uses, over the CPUs one pod gets."""
    user = dict(request.env)
    try:
        ranks = plan_ranks(topology, nodes, backend=stack.backend, ipex=stack.ipex, ppn=request.ppn,
                           threads=request.threads, master_addr="set-by-torchrun", extra_env=user)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return ranks if request.tuned else untuned(ranks, user)


def pod_env(request: TrainRequest, stack: Stack, ranks: RankPlan, paths: DataPaths) -> tuple[EnvVar, ...]:
    """The planner's threads, binding and LD_PRELOAD, then what `python -m xeoncluster.node` reads; --env wins."""
    planned = {name: value for name, value in ranks.env
               if name not in RENDEZVOUS_BY_TORCHRUN and not name.startswith(MPI_ONLY_PREFIX)}
    if ranks.ranks_per_node > 1:
        planned = {name: value for name, value in planned.items() if name not in THREAD_BINDING}
    env = planned | {
        "PYTHONPATH": PACKAGE_ROOT,
        XC_STACK: stack.name,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HOME": paths.hf_home,
    }
    if request.hub_offline:
        env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env |= dict(request.env)
    return tuple(EnvVar(name, value) for name, value in env.items())


def plan_notes(ranks: RankPlan) -> tuple[str, ...]:
    """The planner's notes that hold under torchrun, and what the pod's env leaves out and why."""
    notes = [note for note in ranks.notes if "Intel MPI" not in note]
    if ranks.ranks_per_node > 1 and ranks.threads_per_rank:
        notes.append(f"{ranks.ranks_per_node} ranks share the pod's CPUs: no thread binding "
                     "(torchrun gives ranks no CPU set of their own); the kernel spreads their threads")
    return tuple(notes)
