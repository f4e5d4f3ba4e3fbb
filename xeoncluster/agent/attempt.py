"""One launch of a run's job: mpiexec on the master, every line into the run's log, every event into
its events file and to the supervisor, and the two ways to stop it early.

- `ask_to_stop()` creates the stop file on the master: the ranks save a checkpoint at the next step
  boundary and exit with EXIT_STOPPED (cancel, a replacement that is ready).
- `interrupt()` sends SIGINT to mpiexec, which ends every rank at once (a node vanished and the
  others would wait for it in their all-reduce until TCP gives up).
"""
from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

from xeoncluster.agent.node_watch import STOP_GRACE_SECONDS, stop_command
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import RemoteError, XeonClusterError
from xeoncluster.job.script_plan import quoted_signal
from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.node.events.events import RunEvent, parse_line
from xeoncluster.node.rank_env import STOP_FILE
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import all_of, remote_command, written_to
from xeoncluster.remote.shell import CommandResult, NodeShell
from xeoncluster.runs.record import RunFiles
from xeoncluster.wire.layout import RemoteLayout

Kind = TypeVar("Kind", bound=RunEvent)  # one class of event: Outcome.last finds the newest of its kind

LAUNCHER_PID = "launcher.pid"


@dataclass
class Outcome:
    exit_code: int
    detail: str = ""                   # the stream's last words when it ended without an exit status
    events: list[RunEvent] = field(default_factory=list)

    def last(self, kind: type[Kind]) -> Kind | None:
        return next((e for e in reversed(self.events) if isinstance(e, kind)), None)


class Attempt:
    """`pid_file`: mpiexec's pid, in the run's folder; `held`: a job started ahead (agent/prestart.py), whose
    log lines wait in memory until `release_log()`, so that the log does not mix them with the old job's."""

    def __init__(self, ctx: CommandContext, plan: LaunchPlan, files: RunFiles,
                 on_event: Callable[[RunEvent], None], pid_file: str = LAUNCHER_PID, held: bool = False) -> None:
        self.ctx, self.plan, self.files, self.on_event = ctx, plan, files, on_event
        self.master: Node = plan.nodes[0]
        self.run_dir = RemoteLayout(plan.home).run_dir(plan.run)
        self.pid_file = f"{self.run_dir}/{pid_file}"
        self._streaming: NodeShell | None = None
        self._lock = threading.Lock()
        self._held: list[str] | None = [] if held else None
        # The ranks sign their events with it: a line the job prints in their form is only a log line.
        self.event_key = secrets.token_hex(32)

    def run(self, shell: NodeShell) -> Outcome:
        outcome = Outcome(-1)
        self._streaming = shell
        # A job started ahead must not take the stop request the job it follows is about to get.
        stop = () if self._held is not None else (remote_command("rm", "-f", f"{self.run_dir}/{STOP_FILE}"),)
        command = all_of(remote_command("mkdir", "-p", self.pid_file.rsplit("/", 1)[0]), *stop,
                         written_to("echo $$", self.pid_file), self.plan.exec_command(self.event_key))
        with open(self.files.log, "a") as log, open(self.files.events, "a") as events:
            self._write(log, f"$ {self.plan.command()}")
            sink = self._sink(log, events, outcome)
            try:
                result = shell.stream([self.master], command, sink)[self.master.name]
            except RemoteError as exc:
                result = CommandResult(self.master.name, -1, "", exc.message)
        outcome.exit_code = result.exit_code
        outcome.detail = result.last_line() if result.exit_code < 0 else ""
        return outcome

    def _sink(self, log: TextIO, events: TextIO, outcome: Outcome) -> Callable[[str, str], None]:
        def sink(_node: str, line: str) -> None:
            event = parse_line(line, self.event_key)
            with self._lock:
                if log.closed:  # the stream's last lines after an interrupt
                    return
                if event is None:
                    self._write(log, line)
                    return
                events.write(event.to_json() + "\n")
                events.flush()
                outcome.events.append(event)
            self.on_event(event)
        return sink

    def _write(self, log: TextIO, line: str) -> None:
        if self._held is not None:
            self._held.append(line)
            return
        log.write(line + "\n")
        log.flush()

    def release_log(self) -> None:
        """The job started ahead is the run's now: its lines so far, then each as it comes, go to the log."""
        with self._lock, open(self.files.log, "a") as log:
            held, self._held = self._held or [], None
            log.writelines(line + "\n" for line in held)

    def ask_to_stop(self, shell: NodeShell) -> None:
        """The ranks checkpoint at the next step boundary and stop (rank 0 polls this file). `shell` is
        not the streaming one: its connection to the master is busy."""
        result = shell.run([self.master], self._stop_file())
        if not result[self.master.name].ok:
            raise RemoteError(f"could not ask the ranks to stop on {self.master.name}: "
                              f"{result[self.master.name].last_line()}")
        if self.plan.signal_ranks:
            # A user's script: every rank gets SIGTERM, and its node the stop file it may poll instead.
            shell.run([n for n in self.plan.nodes if n != self.master], self._stop_file())
            shell.run(list(self.plan.nodes), quoted_signal(self.plan.home, self.plan.run))

    def _stop_file(self) -> str:
        return all_of(remote_command("mkdir", "-p", self.run_dir),
                      remote_command("touch", f"{self.run_dir}/{STOP_FILE}"))

    def interrupt(self, shell: NodeShell, master_gone: bool = False, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGINT to mpiexec (over `shell`, not the streaming connection), KILL after `grace` seconds; with
        the master gone, end the stream's own connection, which would otherwise hang."""
        if not master_gone:
            try:
                shell.run([self.master], stop_command(self.pid_file, grace))
                return
            except XeonClusterError:
                pass
        if self._streaming is not None:
            self._streaming.close()
