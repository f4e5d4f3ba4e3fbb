"""`xeoncluster train`: sync, read topology, plan ranks and env, run mpirun from the master, fetch results."""
from __future__ import annotations

import json
import re
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..context import CommandContext
from ..errors import RemoteError, TrainingError
from ..package_sync import package_files, sync_data_file, sync_tree
from ..paths import project_file
from ..remote import CommandResult, NodeShell
from ..remote_layout import PACKAGE_ROOT, VENV
from ..stacks import get_stack
from ..topology import CpuTopology, parse_probe, probe_command
from ..train_plan import LaunchPlan, TrainRequest, build_plan, check_request, default_run_name

# What a run leaves next to metrics.json on the master; each exists only when the run had something to put in it.
OPTIONAL_RESULTS = ("predictions.json", "null_odds.json", "loss.png")

# The interface each node reaches the master's private address over (on the master: the one holding it).
IFACE_PROBE = ("dev=$(ip -o -4 route get {ip} 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'); "
               "if [ \"$dev\" = lo ]; then dev=$(ip -o -4 addr show to {ip} 2>/dev/null | awk '{{print $2}}'); fi; "
               "echo iface=$dev")


@dataclass
class TrainOutcome:
    plan: LaunchPlan
    exit_code: int
    log: Path
    metrics: dict[str, object] | None = None
    metrics_path: Path | None = None
    results: list[Path] = field(default_factory=list)
    model_dir: Path | None = None
    seconds: float = 0.0
    synced: list[str] = field(default_factory=list)


def run(ctx: CommandContext, request: TrainRequest, echo: Callable[[str], None],
        dry_run: bool = False) -> LaunchPlan | TrainOutcome:
    return TrainRunner(ctx, request, echo).run(dry_run)


class TrainRunner:
    def __init__(self, ctx: CommandContext, request: TrainRequest, echo: Callable[[str], None]) -> None:
        self.ctx = ctx
        self.request = request
        self.echo = echo
        record = ctx.require_up()
        self.nodes = record.node_list()
        self.stack = get_stack(str(record.config.get("stack", ctx.config.stack)))

    def run(self, dry_run: bool) -> LaunchPlan | TrainOutcome:
        """Plan the job; unless this is a dry run, also launch it and fetch its results."""
        shell = self.ctx.shell()
        try:
            plan = self.prepare(shell, dry_run)
            if dry_run:
                return plan
            self.ctx.reporter.info(
                f"run {plan.run}: {plan.ranks.world_size} ranks on {len(plan.nodes)} node(s); "
                f"log: {self.ctx.state.runs / plan.run / 'train.log'}")
            return self.launch(shell, plan)
        finally:
            shell.close()

    def prepare(self, shell: NodeShell, dry_run: bool) -> LaunchPlan:
        check_request(self.request, self.stack)
        reporter = self.ctx.reporter
        with reporter.step(f"read topology of {len(self.nodes)} node(s)"):
            topology, home, iface = self._probe(shell)
            reporter.detail(topology.describe() + (f"; nodes reach the master over {iface}" if iface else ""))
        data: dict[str, str] = {}
        if not dry_run:
            with reporter.step("sync the training package and data"):
                package = project_file("training")
                result = sync_tree(shell, self.nodes, package, package_files(package), "training")
                reporter.detail(f"training package {result.digest}: sent to {', '.join(result.sent_to) or 'none (unchanged)'}")
                data = self._sync_data(shell)
        run = self.request.run or (self._latest_run() if self.request.resume else None) or default_run_name(
            self.request.task)
        return build_plan(self.request, self.stack, self.nodes, topology, home, run, data, iface)

    def _probe(self, shell: NodeShell) -> tuple[CpuTopology, str, str | None]:
        # The venv argument stays outside the quoting so that the node's shell expands $HOME.
        command = (f'echo home=$HOME; {probe_command()} "$HOME/{VENV}"; '
                   f"{IFACE_PROBE.format(ip=shlex.quote(self.nodes[0].private_ip))}")
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
            self.ctx.reporter.warn(f"{', '.join(differing)} differ from node0's topology; planning for node0")
        return master, homes.pop(), self._common_iface(results)

    def _common_iface(self, results: dict[str, CommandResult]) -> str | None:
        found = {name: value for name, r in results.items() for line in r.stdout.splitlines()
                 if line.startswith("iface=") for value in [line.split("=", 1)[1].strip()]}
        names = set(found.values())
        if len(names) == 1 and "" not in names:
            return names.pop()
        seen = ", ".join(f"{name}={value or '?'}" for name, value in sorted(found.items()))
        self.ctx.reporter.warn(f"nodes reach the master over different or unknown interfaces ({seen}); "
                               "GLOO_SOCKET_IFNAME is left to gloo")
        return None

    def _sync_data(self, shell: NodeShell) -> dict[str, str]:
        data = {}
        if self.request.train_file:
            data["train"] = sync_data_file(shell, self.nodes, self.request.train_file)
        if self.request.eval_file:
            data["eval"] = sync_data_file(shell, self.nodes, self.request.eval_file)
        return data

    def _latest_run(self) -> str | None:
        runs = sorted((p for p in self.ctx.state.runs.glob(f"{self.request.task}-*") if p.is_dir()),
                      key=lambda p: p.stat().st_mtime)
        return runs[-1].name if runs else None

    def launch(self, shell: NodeShell, plan: LaunchPlan) -> TrainOutcome:
        run_dir = self.ctx.state.runs / plan.run
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
        remote_run = f"{PACKAGE_ROOT}/runs/{plan.run}"
        outcome.metrics_path = run_dir / "metrics.json"
        shell.get(master, f"{remote_run}/metrics.json", outcome.metrics_path)
        outcome.metrics = json.loads(outcome.metrics_path.read_text())
        outcome.results = self._fetch_optional(shell, remote_run, run_dir)
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


    def _fetch_optional(self, shell: NodeShell, remote_run: str, run_dir: Path) -> list[Path]:
        """Fetch those of OPTIONAL_RESULTS the run wrote; a missing one (no evaluation set) is no failure."""
        master = self.nodes[0]
        listing = shell.run([master], f"cd {remote_run} && ls -1 -- {' '.join(OPTIONAL_RESULTS)} 2>/dev/null; true")
        present = set(listing[master.name].stdout.split())
        fetched = []
        for name in (n for n in OPTIONAL_RESULTS if n in present):
            shell.get(master, f"{remote_run}/{name}", run_dir / name)
            fetched.append(run_dir / name)
        return fetched


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
