"""`xeoncluster train`: sync, read topology, plan ranks and env, run mpirun from the master, fetch results."""
from __future__ import annotations

import json
import re
import tarfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from . import catalog
from .errors import ConfigError, RemoteError, TrainingError, XeonClusterError
from .session import VENV, Session
from .package_sync import REMOTE_ROOT, package_files, sync_data_file, sync_tree
from .providers.base import Node
from .remote import NodeShell
from .resources import project_file
from .stacks import Stack, get_stack
from .topology import CpuTopology, RankPlan, mpirun_command, parse_probe, plan_ranks, probe_command, render_command

TASKS = ("squad", "glue")
LAUNCHER_ENV = "I_MPI_HYDRA_BRANCH_COUNT=-1"
DEFAULT_MODEL = "distilbert-base-uncased"
DEFAULT_DATASETS = {"squad": "squad", "glue": "glue"}


@dataclass(frozen=True)
class TrainRequest:
    """Everything the user asked for; a value that a dry run can print."""

    task: str
    glue_task: str = "mrpc"
    dataset: str | None = None
    train_file: Path | None = None
    eval_file: Path | None = None
    model: str | None = None
    demo: bool = False
    run: str | None = None
    resume: bool = False
    ppn: int | None = None
    threads: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    trainer_args: tuple[str, ...] = ()
    fetch_model: Path | None = None
    offline: bool = False
    tuned: bool = True


@dataclass(frozen=True)
class LaunchPlan:
    run: str
    nodes: tuple[Node, ...]
    topology: CpuTopology
    ranks: RankPlan
    argv: tuple[str, ...]
    home: str
    notes: tuple[str, ...] = ()

    def command(self) -> str:
        # Only the master holds the cluster key, so Hydra must start every proxy itself rather
        # than through its launch tree (which it uses on large clusters by default).
        return f"{LAUNCHER_ENV} {render_command(self.argv)}"

    def to_dict(self) -> dict[str, object]:
        return {"run": self.run, "nodes": [n.name for n in self.nodes], "world_size": self.ranks.world_size,
                "ranks_per_node": self.ranks.ranks_per_node, "threads_per_rank": self.ranks.threads_per_rank,
                "env": dict(self.ranks.env), "argv": list(self.argv), "command": self.command(),
                "topology": self.topology.describe(), "notes": list(self.notes)}


@dataclass
class TrainOutcome:
    plan: LaunchPlan
    exit_code: int
    log: Path
    metrics: dict[str, object] | None = None
    metrics_path: Path | None = None
    model_dir: Path | None = None
    seconds: float = 0.0
    synced: list[str] = field(default_factory=list)


def parse_env(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    result = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConfigError(f"--env {pair!r}: expected NAME=VALUE", hint="e.g. --env KMP_BLOCKTIME=0")
        result.append((key, value))
    return tuple(result)


def default_run_name(task: str) -> str:
    return f"{task}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_request(request: TrainRequest, stack: Stack) -> None:
    """Impossible combinations fail here, before anything runs."""
    if request.task not in TASKS:
        raise ConfigError(f"unknown task '{request.task}'; choose one of {', '.join(TASKS)}")
    if request.dataset and (request.train_file or request.demo):
        raise ConfigError("--dataset cannot be combined with --train-file or --demo")
    if request.demo and (request.train_file or request.model):
        raise ConfigError("--demo brings its own model and data; drop --train-file/--model, or drop --demo")
    if request.eval_file and not request.train_file:
        raise ConfigError("--eval-file needs --train-file")
    if request.ppn is not None and request.ppn < 1:
        raise ConfigError(f"--ppn must be at least 1 (got {request.ppn})")
    if request.threads is not None and request.threads < 1:
        raise ConfigError(f"--threads must be at least 1 (got {request.threads})")
    backend = requested_backend(request.trainer_args)
    if backend == "ccl" and stack.backend != "ccl":
        raise ConfigError(f"the ccl backend needs the intel stack (oneCCL bindings); this cluster runs the "
                          f"{stack.name} stack, which has only {stack.backend}",
                          hint="drop --ddp-backend ccl, or `up` a cluster with --stack intel")


def requested_backend(trainer_args: tuple[str, ...]) -> str | None:
    for index, arg in enumerate(trainer_args):
        name, sep, value = arg.partition("=")
        if name in ("--ddp-backend", "--ddp_backend"):
            return value if sep else (trainer_args[index + 1] if index + 1 < len(trainer_args) else None)
    return None


def program_args(request: TrainRequest, stack: Stack, home: str, run: str, data: dict[str, str]) -> list[str]:
    args = [f"{home}/{VENV.removeprefix('~/')}/bin/python", "-m", "training", request.task]
    if request.task == "glue":
        args += ["--task", request.glue_task]
    if request.demo:
        args += ["--demo", f"{home}/{REMOTE_ROOT}/demo"]
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
    args += ["--output-dir", f"{home}/{REMOTE_ROOT}/runs/{run}", "--stack", stack.name]
    if request.resume:
        args.append("--resume")
    return args + list(request.trainer_args)


def launch_env(request: TrainRequest, stack: Stack, home: str) -> dict[str, str]:
    # No PYTHONUNBUFFERED: unbuffered print() writes text and newline separately, and Intel MPI's
    # -l labels each write, splitting lines. The training package flushes whole lines itself.
    env = {"PYTHONPATH": f"{home}/{REMOTE_ROOT}", "XC_STACK": stack.name, "TOKENIZERS_PARALLELISM": "false"}
    if request.offline or request.demo:
        env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return env | dict(request.env)


def build_plan(request: TrainRequest, stack: Stack, nodes: list[Node], topology: CpuTopology, home: str,
               run: str, data: dict[str, str]) -> LaunchPlan:
    master = nodes[0]
    try:
        ranks = plan_ranks(topology, len(nodes), backend=stack.backend, ipex=stack.ipex, ppn=request.ppn,
                           threads=request.threads, master_addr=master.private_ip,
                           extra_env=launch_env(request, stack, home))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not request.tuned:
        ranks = untuned(ranks, launch_env(request, stack, home))
    program = program_args(request, stack, home, run, data)
    mpiexec = f"{home}/{VENV.removeprefix('~/')}/bin/mpiexec.hydra"
    argv = mpirun_command(mpiexec, f"{home}/hosts", ranks, program)
    return LaunchPlan(run, tuple(nodes), topology, ranks, tuple(argv), home, ranks.notes)


UNTUNED_KEEP = ("MASTER_ADDR", "MASTER_PORT")


def untuned(ranks: RankPlan, extra: dict[str, str]) -> RankPlan:
    """Plain defaults for comparison: no thread counts, pinning domains, or tcmalloc; just rendezvous."""
    env = tuple((k, v) for k, v in ranks.env if k in UNTUNED_KEEP) + tuple(extra.items())
    return replace(ranks, env=env, threads_per_rank=0, notes=ranks.notes + ("untuned: library defaults",))


def dry_run_plan(request: TrainRequest, stack: Stack, instance_type: str, node_count: int, user: str) -> LaunchPlan:
    """For a cluster that does not exist yet: topology from the instance catalog."""
    kind = catalog.lookup(instance_type)
    if kind is None:
        hint = catalog.nearest(instance_type)
        raise ConfigError(f"unknown instance type '{instance_type}'" + (f" (did you mean '{hint}'?)" if hint else ""))
    home = "/root" if user == "root" else f"/home/{user}"
    nodes = [Node(name=f"node{i}", id="(planned)", private_ip="<node0-private-ip>" if i == 0 else "", ssh_host="",
                  role="master" if i == 0 else "worker", market="", instance_type=instance_type)
             for i in range(node_count)]
    data = {"train": f"{REMOTE_ROOT}/data/<digest>/{request.train_file.name}"} if request.train_file else {}
    if request.eval_file:
        data["eval"] = f"{REMOTE_ROOT}/data/<digest>/{request.eval_file.name}"
    return build_plan(request, stack, nodes, catalog.topology_of(kind), home, request.run or "<run>", data)


class TrainRunner:
    def __init__(self, session: Session, request: TrainRequest, echo: Callable[[str], None]) -> None:
        self.session = session
        self.request = request
        self.echo = echo
        record = session.state.load()
        if record is None or record.status != "ready":
            raise XeonClusterError(f"cluster '{session.config.name}' is not up",
                                   hint=f"run `xeoncluster up --name {session.config.name}` first")
        self.nodes = record.node_list()
        self.stack = get_stack(str(record.config.get("stack", session.config.stack)))

    def run(self, dry_run: bool) -> LaunchPlan | TrainOutcome:
        """Plan the job; unless this is a dry run, also launch it and fetch its results."""
        shell = self.session.shell()
        try:
            plan = self.prepare(shell, dry_run)
            if dry_run:
                return plan
            self.session.reporter.info(
                f"run {plan.run}: {plan.ranks.world_size} ranks on {len(plan.nodes)} node(s); "
                f"log: {self.session.state.runs / plan.run / 'train.log'}")
            return self.launch(shell, plan)
        finally:
            shell.close()

    def prepare(self, shell: NodeShell, dry_run: bool) -> LaunchPlan:
        check_request(self.request, self.stack)
        reporter = self.session.reporter
        with reporter.step(f"read topology of {len(self.nodes)} node(s)"):
            topology, home = self._probe(shell)
            reporter.detail(topology.describe())
        data: dict[str, str] = {}
        if not dry_run:
            with reporter.step("sync the training package and data"):
                package = project_file("training")
                result = sync_tree(shell, self.nodes, package, package_files(package), "training")
                reporter.detail(f"training package {result.digest}: sent to {', '.join(result.sent_to) or 'none (unchanged)'}")
                data = self._sync_data(shell)
        run = self.request.run or (self._latest_run() if self.request.resume else None) or default_run_name(
            self.request.task)
        return build_plan(self.request, self.stack, self.nodes, topology, home, run, data)

    def _probe(self, shell: NodeShell) -> tuple[CpuTopology, str]:
        command = f"echo home=$HOME; {probe_command(VENV.replace('~', '$HOME'))}"
        results = shell.run(self.nodes, command)
        failed = [r for r in results.values() if not r.ok]
        if failed:
            raise RemoteError(f"cannot read the CPU topology of {failed[0].node}: {failed[0].last_line()}")
        topologies = {name: parse_probe(r.stdout) for name, r in results.items()}
        homes = {line.split("=", 1)[1] for r in results.values() for line in r.stdout.splitlines()
                 if line.startswith("home=")}
        if len(homes) != 1:
            raise RemoteError(f"nodes disagree on the home directory ({', '.join(sorted(homes))}); "
                              "MPI needs the venv at the same path everywhere")
        master = topologies[self.nodes[0].name]
        differing = sorted(n for n, t in topologies.items() if t != master)
        if differing:
            self.session.reporter.warn(f"{', '.join(differing)} differ from node0's topology; planning for node0")
        return master, homes.pop()

    def _sync_data(self, shell: NodeShell) -> dict[str, str]:
        data = {}
        if self.request.train_file:
            data["train"] = sync_data_file(shell, self.nodes, self.request.train_file)
        if self.request.eval_file:
            data["eval"] = sync_data_file(shell, self.nodes, self.request.eval_file)
        return data

    def _latest_run(self) -> str | None:
        runs = sorted((p for p in self.session.state.runs.glob(f"{self.request.task}-*") if p.is_dir()),
                      key=lambda p: p.stat().st_mtime)
        return runs[-1].name if runs else None

    def launch(self, shell: NodeShell, plan: LaunchPlan) -> TrainOutcome:
        run_dir = self.session.state.runs / plan.run
        run_dir.mkdir(parents=True, exist_ok=True)
        log = run_dir / "train.log"
        (run_dir / "launch.json").write_text(json.dumps(plan.to_dict(), indent=2))
        started = time.monotonic()
        with open(log, "a") as handle:
            handle.write(f"$ {plan.command()}\n")

            def sink(_node: str, line: str) -> None:
                handle.write(line + "\n")
                handle.flush()
                self.echo(line)

            result = shell.stream([self.nodes[0]], plan.command(), sink)[self.nodes[0].name]
        outcome = TrainOutcome(plan, result.exit_code, log, seconds=time.monotonic() - started)
        if result.exit_code != 0:
            error = TrainingError(failure_line(log.read_text(), result.exit_code), log=log,
                                  hint="see the log; `xeoncluster status` shows which nodes answer")
            error.exit_code = result.exit_code if 0 < result.exit_code < 128 else 1
            raise error
        self._fetch(shell, plan, run_dir, outcome)
        return outcome

    def _fetch(self, shell: NodeShell, plan: LaunchPlan, run_dir: Path, outcome: TrainOutcome) -> None:
        master = self.nodes[0]
        remote_run = f"{REMOTE_ROOT}/runs/{plan.run}"
        outcome.metrics_path = run_dir / "metrics.json"
        shell.get(master, f"{remote_run}/metrics.json", outcome.metrics_path)
        outcome.metrics = json.loads(outcome.metrics_path.read_text())
        if self.request.fetch_model is not None:
            packed = f"{remote_run}/model.tar.gz"
            result = shell.run([master], f"tar -C {remote_run} -czf {packed} model")[master.name]
            if not result.ok:
                raise RemoteError(f"could not pack the model on {master.name}: {result.last_line()}")
            archive = run_dir / "model.tar.gz"
            shell.get(master, packed, archive)
            self.request.fetch_model.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive) as tar:
                tar.extractall(self.request.fetch_model, filter="data")
            archive.unlink()
            outcome.model_dir = self.request.fetch_model / "model"


def failure_line(log_text: str, exit_code: int) -> str:
    """Name the rank and node that failed, from what Intel MPI / Python printed."""
    own = re.findall(r"^\[(\d+)\] (training: .+)$", log_text, re.M)
    if own:
        rank, message = own[0]
        return f"rank {rank}: {message}"
    bad = re.search(r"RANK (\d+) PID \d+ RUNNING AT (\S+)\s*\n=?\s*(KILLED BY SIGNAL: (\d+)(?: \((\w+)\))?|"
                    r"EXIT (?:STATUS|CODE): (\d+))", log_text)
    if bad:
        rank, node = bad.group(1), bad.group(2)
        if bad.group(4):
            name = f" ({bad.group(5)})" if bad.group(5) else ""
            return f"training failed: rank {rank} on {node} was killed by signal {bad.group(4)}{name}"
        return f"training failed: rank {rank} on {node} exited with code {bad.group(6)}"
    lost = re.search(r"(?:ssh: connect to host|Could not resolve hostname|connection to) (\S+)", log_text)
    if lost:
        return f"training failed: cannot reach node {lost.group(1).rstrip(':')} from the master"
    errors = [line for line in log_text.splitlines() if re.search(r"\b(Error|error:)", line)]
    if errors:
        return f"training failed (exit {exit_code}): {errors[-1].strip()[:200]}"
    return f"training failed with exit code {exit_code}"
