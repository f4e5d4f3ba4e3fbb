"""What `train` asks for and the launch it plans: a value a dry run prints and a real run executes."""
from __future__ import annotations

import json
import math
import re
import shlex
import time
from dataclasses import dataclass, replace

from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import Stack
from xeoncluster.job import script_plan
from xeoncluster.job.tracker_env import tracker_env
from xeoncluster.job.train_request import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_STALL_MINUTES,
    RUN_NAME,
    AnyRequest,
    ScriptRequest,
    TaskRequest,
    TrainRequest,
)
from xeoncluster.node import stack_rules
from xeoncluster.node.events.events import EVENT_KEY_ENV
from xeoncluster.node.rank_env import (
    STOP_FILE,
    XC_BATCH_WORLD,
    XC_ENV_FILE,
    XC_HOLD_FILE,
    XC_NOTICE_POLICY,
    XC_NOTICES,
    XC_STACK,
    XC_STOP_FILE,
)
from xeoncluster.node.tasks.glue_data import (
    TASKS as GLUE_TASKS,  # no torch/transformers at import: safe on the user's machine
)
from xeoncluster.providers.base import Node
from xeoncluster.providers.node_kinds import Market, Role
from xeoncluster.providers.registry import storage_forms
from xeoncluster.providers.shared_settings import StorageSettings
from xeoncluster.topology import MASTER_PORT, CpuTopology, RankPlan, mpirun_command, plan_ranks, render_command
from xeoncluster.wire.layout import NODE_MODULE, PACKAGE_ROOT, RemoteLayout

TASKS = ("squad", "glue")
LAUNCHER_ENV = "I_MPI_HYDRA_BRANCH_COUNT=-1"
DEFAULT_MODEL = "distilbert-base-uncased"
DEFAULT_DATASETS = {"squad": "squad", "glue": "glue"}
REDACTED = "<redacted>"
ENV_FILE = "env"  # in the run's folder on every node: --env values, mode 0600, read by `python -m xeoncluster.node`
AHEAD_PORT = "29501"  # a job started ahead joins its process group here while the job it follows holds 29500


@dataclass(frozen=True)
class LaunchPlan:
    run: str
    nodes: tuple[Node, ...]
    topology: CpuTopology
    ranks: RankPlan
    argv: tuple[str, ...]
    home: str
    notes: tuple[str, ...] = ()
    user_env: tuple[str, ...] = ()  # names from --env; their values travel only in the 0600 env file
    signal_ranks: bool = False      # a user's script: a stop also sends SIGTERM to every rank
    program: tuple[str, ...] = ()   # what each rank runs (argv's tail)

    def command(self) -> str:
        # Only the master holds the cluster key, so Hydra must start every proxy itself rather
        # than through its launch tree (which it uses on large clusters by default).
        return f"{LAUNCHER_ENV} {render_command(self.argv)}"

    def exec_command(self, event_key: str) -> str:
        """command() with the launcher exec'ed, so that the remote shell's $$ is mpiexec's pid, and the
        launch's event key in every rank's environment (node/events/events.py). Not in command(): that is
        logged and shown, and the key must not reach the job's output."""
        argv = (self.argv[0], "-genv", EVENT_KEY_ENV, event_key, *self.argv[1:])
        return f"{LAUNCHER_ENV} exec {render_command(argv)}"

    def ahead(self, hostfile: str, release: str, busy_port: str) -> LaunchPlan:
        """This launch, started while another job of the run still trains (agent/prestart.py): its nodes from
        `hostfile`, its rendezvous on the port the other does not hold, its ranks held until `release`."""
        port = AHEAD_PORT if busy_port != AHEAD_PORT else MASTER_PORT
        kept = ((key, port if key == "MASTER_PORT" else value) for key, value in self.ranks.env if key != XC_HOLD_FILE)
        env = (*kept, (XC_HOLD_FILE, release))
        ranks = replace(self.ranks, env=env)
        return replace(self, ranks=ranks, argv=tuple(mpirun_command(self.argv[0], hostfile, ranks, self.program)))

    def warm_up(self, host: str, program: list[str]) -> str:
        """`program` as one rank of this launch's first local rank on `host` alone (run from the master): a
        rank MPI starts, with this launch's environment and pinning, so it leaves the node's warm server
        (node/warm_start) as the next job's rank there will look for it, which then starts forked from it."""
        env = [part for key, value in self.ranks.env if key != XC_HOLD_FILE for part in ("-genv", key, value)]
        argv = [self.argv[0], "-hosts", host, "-n", "1", "-ppn", "1", *env, *program]
        return f"{LAUNCHER_ENV} {render_command(argv)}"

    @property
    def port(self) -> str:
        return self.ranks.env_dict().get("MASTER_PORT", MASTER_PORT)

    def to_dict(self) -> dict[str, object]:
        return {"run": self.run, "nodes": [n.name for n in self.nodes], "world_size": self.ranks.world_size,
                "ranks_per_node": self.ranks.ranks_per_node, "threads_per_rank": self.ranks.threads_per_rank,
                "env": dict(self.ranks.env) | dict.fromkeys(self.user_env, REDACTED),
                "argv": list(self.argv), "command": self.command(),
                "topology": self.topology.describe(), "notes": list(self.notes)}


def parse_env(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    result = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConfigError(f"--env {pair!r}: expected NAME=VALUE", hint="e.g. --env KMP_BLOCKTIME=0")
        result.append((key, value))
    return tuple(result)


def check_run_name(run: str | None) -> None:
    """A run name becomes a folder here and on every node: no path separators, no `..`."""
    if run is not None and not RUN_NAME.fullmatch(run):
        raise ConfigError(f"--run {run!r}: a run name is 1-64 letters, digits, '.', '_' or '-', starting with a "
                          "letter or digit", hint="e.g. --run squad-lr5e-5")


def default_run_name(request: AnyRequest) -> str:
    prefix = script_plan.run_prefix(request) if isinstance(request, ScriptRequest) else request.task
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"


def resume_command(request: AnyRequest, cluster: str, run: str, resume: bool = True) -> str:
    """The `xeoncluster train` line that continues `run` with the same options (--env values elided);
    without `resume`, the line that submits it again from the start."""
    task = request if isinstance(request, TaskRequest) else None
    args = ["xeoncluster", "train", *(script_plan.resume_args(request) if isinstance(request, ScriptRequest)
                                      else [request.task]), "--name", cluster]
    if task is not None and task.task == "glue":
        args += ["--task", task.glue_task]
    task_valued = (("--dataset", task.dataset), ("--train-file", task.train_file), ("--eval-file", task.eval_file),
                   ("--model", task.model)) if task is not None else ()
    valued = (*task_valued, ("--ppn", request.ppn), ("--threads", request.threads),
              ("--fetch-model", request.fetch_model),
              ("--max-restarts", request.max_restarts if request.max_restarts != DEFAULT_MAX_RESTARTS else None),
              ("--max-interruptions", request.max_interruptions),
              ("--min-nodes", request.min_nodes if request.min_nodes != 1 else None),
              ("--stall-minutes", request.stall_minutes if request.stall_minutes != DEFAULT_STALL_MINUTES else None),
              ("--storage", request.storage),
              # A resumed run gets a ceiling of its own only when one is given: the spent one is not renewed.
              ("--max-cost", None if resume else request.max_cost))
    args += [part for flag, value in valued if value is not None for part in (flag, str(value))]
    args += [flag for flag, on in (("--demo", task is not None and task.demo), ("--offline", request.offline),
                                   ("--no-tune", not request.tuned),
                                   ("--wait-for-replacement", not request.train_while_replacing)) if on]
    args += [part for name, _ in request.env for part in ("--env", f"{name}=...")]
    args += ["--run", run, *(["--resume"] if resume else [])]
    return shlex.join(args + (["--", *request.trainer_args] if request.trainer_args else []))


def resume_line(command: str) -> str:
    """The line that continues a run, from the one that submits it again (its record's `command`): with
    --resume, and without its --max-cost, as resume_command() writes it."""
    args = shlex.split(command)
    at = args.index("--") if "--" in args else len(args)
    head = args[:at]
    if "--max-cost" in head:
        del head[head.index("--max-cost"):head.index("--max-cost") + 2]
    return shlex.join([*head, "--resume", *args[at:]])


def check_request(request: AnyRequest, stack: Stack) -> None:
    """Impossible combinations fail here, before anything runs."""
    check_run_name(request.run)
    if isinstance(request, ScriptRequest):
        script_plan.check_script_request(request)
    else:
        check_task_request(request)
    if request.ppn is not None and request.ppn < 1:
        raise ConfigError(f"--ppn must be at least 1 (got {request.ppn})")
    if request.storage is not None:
        try:
            StorageSettings(url=request.storage)
        except ValueError:
            raise ConfigError(f"--storage {request.storage!r}: must be {storage_forms()}",
                              hint="or leave it out for the config's storage (README: `storage:`)") from None
    if request.stall_minutes <= 0:
        raise ConfigError(f"--stall-minutes must be more than 0 (got {request.stall_minutes})")
    for flag, bound in (("--max-restarts", request.max_restarts), ("--max-interruptions", request.max_interruptions)):
        if bound is not None and bound < 0:
            raise ConfigError(f"{flag} must be 0 or more (got {bound})")
    if request.max_cost is not None and not (math.isfinite(request.max_cost) and request.max_cost > 0):
        raise ConfigError(f"--max-cost must be a number of US dollars above 0 (got {request.max_cost})")
    if request.threads is not None and request.threads < 1:
        raise ConfigError(f"--threads must be at least 1 (got {request.threads})")
    backend = requested_backend(request.trainer_args)
    if backend == "ccl" and not stack_rules.ccl_allowed(stack.backend):
        raise ConfigError(f"the ccl backend needs the intel stack (oneCCL bindings); this cluster runs the "
                          f"{stack.name} stack, which has only {stack.backend}",
                          hint="drop --ddp-backend ccl, or `up` a cluster with --stack intel")


def check_task_request(request: TaskRequest) -> None:
    if request.task not in TASKS:
        raise ConfigError(f"unknown task '{request.task}'; choose one of {', '.join(TASKS)}, a script PATH.py, "
                          "or -m MODULE")
    if request.task == "glue" and request.glue_task not in GLUE_TASKS:
        raise ConfigError(f"--task {request.glue_task!r}: not a GLUE task; "
                          f"choose one of {', '.join(sorted(GLUE_TASKS))}")
    if request.dataset and (request.train_file or request.demo):
        raise ConfigError("--dataset cannot be combined with --train-file or --demo")
    if request.demo and (request.train_file or request.model):
        raise ConfigError("--demo brings its own model and data; drop --train-file/--model, or drop --demo")
    if request.eval_file and not request.train_file:
        raise ConfigError("--eval-file needs --train-file")


def requested_backend(trainer_args: tuple[str, ...]) -> str | None:
    for index, arg in enumerate(trainer_args):
        name, sep, value = arg.partition("=")
        if name in ("--ddp-backend", "--ddp_backend"):
            return value if sep else (trainer_args[index + 1] if index + 1 < len(trainer_args) else None)
    return None


def program_args(request: TaskRequest, stack: Stack, home: str, run: str, data: dict[str, str]) -> list[str]:
    layout = RemoteLayout(home)
    args = [layout.python, "-m", NODE_MODULE, request.task]
    if request.task == "glue":
        args += ["--task", request.glue_task]
    if request.demo:
        args += ["--demo", f"{layout.package_root}/demo"]
    elif request.train_file:
        args += ["--train-file", f"{home}/{data['train']}"]
        if "eval" in data:
            args += ["--eval-file", f"{home}/{data['eval']}"]
    else:
        args += ["--dataset", request.dataset or DEFAULT_DATASETS[request.task]]
    if request.model and not request.demo:
        args += ["--model", request.model]
    elif not request.demo:
        args += ["--model", DEFAULT_MODEL]
    args += ["--output-dir", layout.run_dir(run), "--stack", stack.name]
    if request.resume:
        args.append("--resume")
    return args + list(request.trainer_args)


def launch_env(request: TrainRequest, stack: Stack, home: str, run: str, iface: str | None = None,
               notices: str | None = None, cluster: str = "") -> dict[str, str]:
    """--env values are not here: argv is visible to every user (`ps`) and is logged. The ranks
    read them from the run's 0600 env file (XC_ENV_FILE) before anything else."""
    # No PYTHONUNBUFFERED: unbuffered print() writes text and newline separately, and Intel MPI's
    # -l labels each write, splitting lines. The training package flushes whole lines itself.
    env = {"PYTHONPATH": RemoteLayout(home).node_lib, XC_STACK: stack.name, "TOKENIZERS_PARALLELISM": "false",
           **tracker_env(home, cluster, run)}
    if iface:
        # gloo and Hydra otherwise pick an address by resolving the hostname, which fails in VPCs
        # without DNS hostnames; the interface that reaches the master's private address always works.
        env |= {"GLOO_SOCKET_IFNAME": iface, "I_MPI_HYDRA_IFACE": iface}
    if request.hub_offline:
        env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if request.env:
        env[XC_ENV_FILE] = f"{RemoteLayout(home).run_dir(run)}/{ENV_FILE}"
    # Ranks checkpoint and stop when the run agent creates this file. A provider's notice (spot
    # interruption) is only reported: the agent replaces the node first, then stops the ranks
    # (xeoncluster/node/checkpoints/interruption.py).
    env[XC_STOP_FILE] = f"{RemoteLayout(home).run_dir(run)}/{STOP_FILE}"
    env[XC_NOTICE_POLICY] = "report"
    if request.batch_world is not None:
        env[XC_BATCH_WORLD] = str(request.batch_world)
    if notices:
        env[XC_NOTICES] = notices
    return env


def env_file_text(request: TrainRequest) -> str:
    return json.dumps(dict(request.env), indent=1) + "\n"


@dataclass(frozen=True)
class Site:
    """Where a plan runs, beyond its nodes: what only a real cluster knows (a dry run has none of it)."""

    iface: str | None = None    # the interface the nodes reach the master over
    notices: str | None = None  # the provider's source of interruption notices
    cluster: str = ""


def build_plan(request: AnyRequest, stack: Stack, nodes: list[Node], topology: CpuTopology, home: str,
               run: str, data: dict[str, str], site: Site = Site()) -> LaunchPlan:
    master = nodes[0]
    env = launch_env(request, stack, home, run, site.iface, site.notices, site.cluster)
    if isinstance(request, ScriptRequest):
        workdir = script_plan.check_script_request(request)
        env |= script_plan.script_env(home, run, workdir)
        program = script_plan.script_args(request, home, run, workdir)
    else:
        program = program_args(request, stack, home, run, data)
    try:
        ranks = plan_ranks(topology, len(nodes), backend=stack.backend, ipex=stack.ipex, ppn=request.ppn,
                           threads=request.threads, master_addr=master.private_ip, extra_env=env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not request.tuned:
        ranks = untuned(ranks, env)
    layout = RemoteLayout(home)
    argv = mpirun_command(layout.mpiexec, layout.hostfile, ranks, program)
    return LaunchPlan(run, tuple(nodes), topology, ranks, tuple(argv), home, ranks.notes,
                      tuple(name for name, _ in request.env), signal_ranks=isinstance(request, ScriptRequest),
                      program=tuple(program))


UNTUNED_KEEP = ("MASTER_ADDR", "MASTER_PORT")


def untuned(ranks: RankPlan, extra: dict[str, str]) -> RankPlan:
    """Plain defaults for comparison: no thread counts, pinning domains, or tcmalloc; just rendezvous."""
    env = tuple((k, v) for k, v in ranks.env if k in UNTUNED_KEEP) + tuple(extra.items())
    return replace(ranks, env=env, threads_per_rank=0, notes=(*ranks.notes, "untuned: library defaults"))


def dry_run_plan(request: AnyRequest, stack: Stack, topology: CpuTopology, instance_type: str, node_count: int,
                 user: str) -> LaunchPlan:
    """For a cluster that does not exist yet: `topology` is what a node of that type would report."""
    if not 1 <= node_count <= 256:
        raise ConfigError(f"--nodes must be between 1 and 256 (got {node_count})")
    home = "/root" if user == "root" else f"/home/{user}"
    nodes = [Node(name=f"node{i}", id="(planned)", private_ip="<node0-private-ip>" if i == 0 else "", ssh_host="",
                  role=Role.MASTER if i == 0 else Role.WORKER, market=Market.PLANNED, instance_type=instance_type)
             for i in range(node_count)]
    data = {}
    if isinstance(request, TaskRequest):
        files = (("train", request.train_file), ("eval", request.eval_file))
        data = {key: f"{PACKAGE_ROOT}/data/<digest>/{path.name}" for key, path in files if path is not None}
    return build_plan(request, stack, nodes, topology, home, request.run or "<run>", data)

