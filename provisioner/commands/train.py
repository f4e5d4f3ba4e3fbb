"""`xeoncluster train`: sync, read topology, plan ranks and env, run mpirun from the master, fetch results."""
from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from ..context import CommandContext
from ..errors import ConfigError, RemoteError, TrainingError, XeonClusterError
from ..package_sync import package_files, sync_data_file, sync_tree
from ..paths import project_file
from ..remote import CommandResult, NodeShell, RemoteFile
from ..remote_layout import PACKAGE_ROOT, VENV, RemoteLayout
from ..stacks import get_stack
from ..topology import CpuTopology, parse_probe, probe_command
from ..train_plan import (
    ENV_FILE,
    LaunchPlan,
    TrainRequest,
    build_plan,
    check_request,
    check_run_name,
    default_run_name,
    env_file_text,
    launched_task,
    resume_command,
)
from .train_failure import failure_line
from .train_recovery import (
    EXIT_INTERRUPTED,
    Restart,
    interrupted_error,
    last_step,
    lost_nodes,
    replace_lost,
    restore_checkpoint,
)
from .train_results import fetch_results
from .train_watch import NodeWatch, stop_command

T = TypeVar("T")
LAUNCHER_PID = "launcher.pid"


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
    restarts: list[Restart] = field(default_factory=list)


def run(ctx: CommandContext, request: TrainRequest, echo: Callable[[str], None],
        dry_run: bool = False) -> LaunchPlan | TrainOutcome:
    return TrainRunner(ctx, request, echo).run(dry_run)


class TrainRunner:
    def __init__(self, ctx: CommandContext, request: TrainRequest, echo: Callable[[str], None]) -> None:
        self.ctx = ctx
        self.request = request
        self.echo = echo
        check_run_name(request.run)
        record = ctx.require_up()
        self.nodes = record.node_list()
        self.stack = get_stack(str(record.config.get("stack", ctx.config.stack)))

    def run(self, dry_run: bool) -> LaunchPlan | TrainOutcome:
        """Plan the job; unless this is a dry run, also launch it and fetch its results.

        A real run holds the cluster's lock: two runs would share MASTER_PORT and kill each other,
        and `down` must not pull the nodes from under a run unless forced."""
        run = self._run_name()
        if dry_run:
            return self._with_shell(lambda shell: self.prepare(shell, run, dry_run=True))
        with self.ctx.state.lock(f"train {self.request.task} --run {run}"):
            return self._with_shell(lambda shell: self._run(shell, run))

    def _with_shell(self, work: Callable[[NodeShell], T]) -> T:
        shell = self.ctx.shell()
        try:
            return work(shell)
        finally:
            shell.close()

    def _run(self, shell: NodeShell, run: str) -> TrainOutcome:
        plan = self.prepare(shell, run, dry_run=False)
        self.ctx.reporter.info(
            f"run {plan.run}: {plan.ranks.world_size} ranks on {len(plan.nodes)} node(s); "
            f"log: {self.ctx.state.runs / plan.run / 'train.log'}")
        return self.launch(shell, plan)

    def prepare(self, shell: NodeShell, run: str, dry_run: bool) -> LaunchPlan:
        check_request(self.request, self.stack)
        reporter = self.ctx.reporter
        with reporter.step(f"read topology of {len(self.nodes)} node(s)"):
            topology, home, iface = self._probe(shell)
            reporter.detail(topology.describe() + (f"; nodes reach the master over {iface}" if iface else ""))
        if self.request.resume:
            self._check_checkpoint(shell, home, run)
        data: dict[str, str] = {}
        if not dry_run:
            with reporter.step("sync the training package and data"):
                package = project_file("training")
                result = sync_tree(shell, self.nodes, package, package_files(package), "training")
                reporter.detail(f"training package {result.digest}: "
                                f"sent to {', '.join(result.sent_to) or 'none (unchanged)'}")
                data = self._sync_data(shell)
        return build_plan(self.request, self.stack, self.nodes, topology, home, run, data, iface,
                          self.ctx.provider.notice_source)

    def _run_name(self) -> str:
        return self.request.run or (self._latest_run() if self.request.resume else None) or default_run_name(
            self.request.task)

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

    def _latest_run(self) -> str:
        """The newest run of this task, whatever its name (launch.json records what it ran)."""
        runs = [(launch.stat().st_mtime, launch.parent.name) for launch in self.ctx.state.runs.glob("*/launch.json")
                if launched_task(launch) == self.request.task]
        if not runs:
            raise ConfigError(f"no earlier {self.request.task} run on cluster '{self.ctx.config.name}' to resume",
                              hint="start one without --resume, or name the run with --run RUN --resume")
        return max(runs)[1]

    def _check_checkpoint(self, shell: NodeShell, home: str, run: str) -> None:
        """`--resume` of a run the master has no checkpoint of would silently start from step 0."""
        master = self.nodes[0]
        remote = RemoteLayout(home).run_dir(run)
        command = f"cd {shlex.quote(remote)} 2>/dev/null || {{ echo no-run; exit 0; }}; ls -d checkpoint-* || true"
        result = shell.run([master], command)[master.name]
        if not result.ok:
            raise RemoteError(f"cannot look for checkpoints on {master.name}: {result.last_line()}")
        if "no-run" in result.stdout.split():
            raise ConfigError(f"--resume: no run '{run}' on {master.name} (master) to resume",
                              hint="`xeoncluster train ... --run RUN --resume` with a run this cluster started")
        if not any(line.startswith("checkpoint-") for line in result.stdout.split()):
            raise ConfigError(f"--resume: run '{run}' has no checkpoint on {master.name} (master)",
                              hint="checkpoints are written every --save-steps steps; start a new run instead")

    def launch(self, shell: NodeShell, plan: LaunchPlan) -> TrainOutcome:
        """Run the job; when it loses a node, replace it and resume (up to --max-restarts times)."""
        run_dir = self.ctx.state.runs / plan.run
        run_dir.mkdir(parents=True, exist_ok=True)
        log = run_dir / "train.log"
        started = time.monotonic()
        restarts: list[Restart] = []
        while True:
            result = self._attempt(shell, plan, log, watch=len(restarts) < self.request.max_restarts)
            if result.exit_code == 0:
                break
            restart = self._recover(shell, plan, result, log) if len(restarts) < self.request.max_restarts else None
            if restart is None:
                raise self._failure(plan, result, log)
            restarts.append(restart)
            plan = self._resume_plan(shell, plan, restart)
        outcome = TrainOutcome(plan, 0, log, seconds=time.monotonic() - started, restarts=restarts)
        self._fetch(shell, plan, run_dir, outcome)
        return outcome

    def _attempt(self, shell: NodeShell, plan: LaunchPlan, log: Path, watch: bool) -> CommandResult:
        (log.parent / "launch.json").write_text(json.dumps(plan.to_dict(), indent=2))
        self._send_env_file(shell, plan)
        with open(log, "a") as handle:
            handle.write(f"$ {plan.command()}\n")

            def sink(_node: str, line: str) -> None:
                if handle.closed:  # the stream's last lines after an interrupt
                    return
                handle.write(line + "\n")
                handle.flush()
                self.echo(line)

            return self._stream(shell, plan, sink, log, watch)

    def _failure(self, plan: LaunchPlan, result: CommandResult, log: Path) -> TrainingError:
        if result.exit_code < 0:
            return self._lost(plan, log, result.last_line())
        if result.exit_code == EXIT_INTERRUPTED:
            return interrupted_error(self.ctx.config.name, plan.run, self.nodes, log)
        error = TrainingError(failure_line(log.read_text(), result.exit_code), log=log,
                              hint="see the log; `xeoncluster status` shows which nodes answer")
        error.exit_code = result.exit_code if 0 < result.exit_code < 128 else 1
        return error

    def _recover(self, shell: NodeShell, plan: LaunchPlan, result: CommandResult, log: Path) -> Restart | None:
        """Replace what the run lost and restore the newest checkpoint; None when no node was lost."""
        started = time.monotonic()
        try:
            record = self.ctx.state.load()
        except XeonClusterError:
            record = None
        if record is None or not record.ready or not log.exists():
            return None  # `down --force` is taking the cluster away: nothing to recover into
        text = log.read_text()
        lost = lost_nodes(self.ctx, record, shell, result.exit_code, text)
        if not lost or len(lost) == len(record.nodes):
            return None  # no survivor holds a checkpoint or the run: that is the cluster gone, not a node
        names = ", ".join(node.name for node, _ in lost)
        self.ctx.reporter.warn(f"run {plan.run} lost {names} ({'; '.join(why for _, why in lost)}); recovering")
        master = self.nodes[0] if all(node.name != self.nodes[0].name for node, _ in lost) else None
        last = last_step(shell, master, RemoteLayout(plan.home), plan.run, text)
        shell.close()  # connections to the lost nodes are dead; every use below reconnects
        replace_lost(self.ctx, record, shell, lost, plan.run)
        self.nodes = record.node_list()
        with self.ctx.reporter.step("restore the newest checkpoint to every node"):
            step = restore_checkpoint(self.ctx, shell, self.nodes, RemoteLayout(plan.home).run_dir(plan.run))
        restart = Restart(names, "; ".join(why for _, why in lost), step, time.monotonic() - started,
                          max(0, last - (step or 0)))
        self.ctx.reporter.warn(restart.describe())
        return restart

    def _resume_plan(self, shell: NodeShell, plan: LaunchPlan, restart: Restart) -> LaunchPlan:
        self.request = replace(self.request, run=plan.run, resume=restart.from_step is not None)
        return self.prepare(shell, plan.run, dry_run=False)

    def _send_env_file(self, shell: NodeShell, plan: LaunchPlan) -> None:
        """--env values go to every node in a file only the login user can read (created 0600 before
        anything is written to it), never into argv, launch.json or the log."""
        if not self.request.env:
            return
        remote_dir = f"{PACKAGE_ROOT}/runs/{plan.run}"
        results = shell.run(self.nodes, f"umask 077 && mkdir -p ~/{remote_dir} && : > ~/{remote_dir}/{ENV_FILE} "
                                        f"&& chmod 600 ~/{remote_dir}/{ENV_FILE}")
        failed = [r for r in results.values() if not r.ok]
        if failed:
            raise RemoteError(f"cannot write the --env file on {failed[0].node}: {failed[0].last_line()}")
        for node in self.nodes:
            shell.put_files(node, [RemoteFile(f"{remote_dir}/{ENV_FILE}", env_file_text(self.request), 0o600)])

    def _stream(self, shell: NodeShell, plan: LaunchPlan, sink: Callable[[str, str], None],
                log: Path, watch: bool) -> CommandResult:
        master = self.nodes[0]
        pid_file = f"~/{PACKAGE_ROOT}/runs/{plan.run}/{LAUNCHER_PID}"
        command = f"mkdir -p ~/{PACKAGE_ROOT}/runs/{plan.run} && echo $$ > {pid_file} && {plan.exec_command()}"
        # Without a restart left, a lost node ends the run as it always did: nothing to watch for.
        names = [n.name for n in self.nodes] if watch else []
        try:
            with NodeWatch(self.ctx, names, lambda gone: self._stop_for_loss(shell, pid_file, gone)):
                return shell.stream([master], command, sink)[master.name]
        except RemoteError as exc:
            return CommandResult(master.name, -1, "", exc.message)
        except KeyboardInterrupt:
            self._stop(pid_file)
            resume = resume_command(self.request, self.ctx.config.name, plan.run)
            error = TrainingError(f"interrupted: run {plan.run} stopped on every node", log=log,
                                  hint=f"continue it with `{resume}`")
            error.exit_code = 130
            raise error from None

    def _stop(self, pid_file: str) -> None:
        """SIGINT to mpiexec on the master (over a new connection), which stops every rank; KILL if it lingers."""
        master = self.nodes[0]
        self.ctx.reporter.info(f"interrupted: stopping the run on {master.name}")
        try:
            self._with_shell(lambda shell: shell.run([master], stop_command(pid_file)))
        except RemoteError as exc:
            self.ctx.reporter.warn(f"could not stop the run on {master.name}: {exc.message}")

    def _stop_for_loss(self, streaming: NodeShell, pid_file: str, gone: list[str]) -> None:
        """From the node watch's thread: stop the job so recovery starts now. With the master gone, or
        unreachable, end the stream's own connection instead, which would otherwise hang."""
        master = self.nodes[0]
        self.ctx.reporter.warn(f"{', '.join(gone)} is gone (no longer listed by the provider); stopping the job")
        if master.name not in gone:
            try:
                self._with_shell(lambda shell: shell.run([master], stop_command(pid_file)))
                return
            except RemoteError:
                pass
        streaming.close()

    def _lost(self, plan: LaunchPlan, log: Path, detail: str) -> TrainingError:
        """The SSH session to the master ended without the job's exit status (node gone, `down --force`)."""
        master = self.nodes[0]
        name = self.ctx.config.name
        gone = "" if log.exists() else "; the cluster's state folder is gone (removed by `down`?)"
        return TrainingError(f"lost connection to {master.name} (master) during run {plan.run} ({detail}){gone}",
                             log=log, hint=f"`xeoncluster status --name {name}` shows whether the nodes answer")

    def _fetch(self, shell: NodeShell, plan: LaunchPlan, run_dir: Path, outcome: TrainOutcome) -> None:
        extra = {"restarts": [r.to_dict() for r in outcome.restarts],
                 "lost_steps": sum(r.lost_steps for r in outcome.restarts)}
        fetched = fetch_results(shell, self.nodes[0], plan.run, run_dir, self.request.fetch_model, extra)
        outcome.metrics, outcome.metrics_path = fetched.metrics, fetched.metrics_path
        outcome.results, outcome.model_dir = fetched.results, fetched.model_dir
