"""A resume that is already running: the next job of a run, started while the current one trains.

When a noticed worker's replacement is ready, the agent does not stop the ranks at once. It first starts
the job that follows on the nodes the run will have (the survivors and the replacement): its ranks import
the libraries, join a process group of their own (the other rendezvous port), load the model, build the
features, and then wait, held (node/startup/hold.py). Only then are the old ranks asked to stop at a step
boundary. Once their checkpoint is on every node (the swap), the agent releases the held ranks, which
resume from it: the pause is the checkpoint, the swap and the checkpoint's load, not a new job's start.
The same serves the two other changes the agent makes to a run's nodes while it trains: a noticed worker
with no replacement to be had (the next job on the survivors: a shrink, agent/shrink.py) and the nodes of a
shrunk run's growth (agent/regrowth.py).

Anything that goes another way (the held job fails, a node is lost without a word, the run is cancelled)
drops the held job, and the run relaunches the usual way.
"""
from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from xeoncluster.agent.attempt import Attempt, Outcome
from xeoncluster.cluster import cluster_files
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.core.stacks import Stack
from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.job.train_request import AnyRequest, TaskRequest
from xeoncluster.node.events.events import RunEvent
from xeoncluster.node.rank_env import STOP_FILE, XC_HOLD_FILE
from xeoncluster.operations.train_prepare import Preparer
from xeoncluster.operations.up_nodes import master_ssh_files
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import all_of, remote_command
from xeoncluster.remote.shell import NodeShell, RemoteFile
from xeoncluster.runs.record import RunFiles, RunRecord
from xeoncluster.wire.layout import RemoteLayout

FOLDER = ".xc-ahead"  # in the run's folder: the held job's hostfile, pid file and release
HELD_WITHIN_SECONDS = 120.0  # a start takes 5-20 s; the old job trains on meanwhile, up to this long
DEADLINE_MARGIN_SECONDS = 15.0  # the old job stops this long before its node's announced end at the latest
DROP_SECONDS = 30.0


class RunNow(Protocol):
    """What of the run (agent/current_run.py, which holds its job started ahead) a start ahead reads."""

    ctx: CommandContext
    files: RunFiles
    request: AnyRequest
    plan: LaunchPlan
    attempt: Attempt | None

    @property
    def record(self) -> RunRecord: ...

    def note(self, text: str) -> None: ...

    def stack(self) -> Stack: ...


class Ahead:
    """One job started ahead: its attempt streams on a connection of its own, in a thread."""

    def __init__(self, run: RunNow, plan: LaunchPlan, on_event: Callable[[RunEvent], None]) -> None:
        self.plan = plan
        self.held = threading.Event()
        self.released = False
        self._forward = on_event
        self.attempt = Attempt(run.ctx, plan, run.files, self._on_event, pid_file=f"{FOLDER}/launcher-{plan.port}.pid",
                               held=True)
        self.outcome: Outcome | None = None
        self._shell = run.ctx.shell()
        self._thread = threading.Thread(target=self._stream, name="xc-ahead", daemon=True)

    @property
    def release_file(self) -> str:
        return self.plan.ranks.env_dict()[XC_HOLD_FILE]

    def start(self) -> Ahead:
        self._thread.start()
        return self

    def _stream(self) -> None:
        try:
            self.outcome = self.attempt.run(self._shell)
        finally:
            self.held.set()  # whoever waits for the hold learns that it ended instead

    def _on_event(self, event: RunEvent) -> None:
        if event.kind == "held":
            self.held.set()
        elif self.released:
            self._forward(event)

    def wait_held(self, seconds: float) -> bool:
        """True once every rank is ready and held; False when the job ended or took longer than `seconds`."""
        return self.held.wait(seconds) and self.outcome is None

    def fits(self, nodes: list[Node]) -> bool:
        """Whether it runs on exactly the nodes the run has now, and still waits."""
        return self.outcome is None and [n.name for n in self.plan.nodes] == [n.name for n in nodes]

    def release(self, shell: NodeShell) -> None:
        """Every node gets the release, after the checkpoint: the held ranks resume from it."""
        command = all_of(remote_command("mkdir", "-p", self.release_file.rsplit("/", 1)[0]),
                         remote_command("rm", "-f", f"{self.attempt.run_dir}/{STOP_FILE}"),
                         remote_command("touch", self.release_file))
        results = shell.run(list(self.plan.nodes), command)
        failed = [r for r in results.values() if not r.ok]
        if failed:
            raise XeonClusterError(f"could not release the job started ahead on {failed[0].node}: "
                                   f"{failed[0].last_line()}")
        self.released = True
        self.attempt.release_log()

    def follow(self) -> Outcome:
        """The released job's outcome, once it ends."""
        self._thread.join()
        self._shell.close()
        assert self.outcome is not None
        return self.outcome

    def drop(self, shell: NodeShell) -> None:
        """The run goes another way: the held job ends, and its lines are not the run's."""
        with contextlib.suppress(XeonClusterError):
            self.attempt.interrupt(shell, grace=1.0)
        self._thread.join(DROP_SECONDS)
        self._shell.close()


def start_ahead(run: RunNow, shell: NodeShell, nodes: list[Node], added: list[Node],
                on_event: Callable[[RunEvent], None], within: float = HELD_WITHIN_SECONDS) -> Ahead | None:
    """The job that follows a change of the run's nodes to `nodes` (a noticed worker swapped for its
    replacement, the survivors of a shrink, or the nodes of a growth, `added` the ones new to the run),
    started, and held once its ranks are ready; it waits for that up to `within` seconds (the notice's time
    left), and a job not held by then is kept all the same: the change releases it whenever its ranks come to
    the hold. None where none can be (a user's script, which has no hold), or when it ended on its own (the
    reason is in the run's log)."""
    if not isinstance(run.request, TaskRequest) or run.attempt is None:
        return None
    current = run.plan
    request = replace(run.request, run=current.run, batch_world=run.record.batch_world, resume=True)
    try:
        preparer = Preparer(run.ctx, request, run.stack(), nodes)
        prepared = preparer.prepare(shell, current.run)
        preparer.send_env_file(shell, current.run)
        folder = f"{RemoteLayout(current.home).run_dir(current.run)}/{FOLDER}"
        plan = prepared.ahead(f"{folder}/hosts", f"{folder}/release-{secrets.token_hex(4)}", current.port)
        made = shell.run([nodes[0]], remote_command("mkdir", "-p", folder))[nodes[0].name]
        if not made.ok:
            raise XeonClusterError(f"could not make {folder} on {nodes[0].name}: {made.last_line()}")
        shell.put_files(nodes[0], [*master_ssh_files(run.ctx, [*current.nodes, *added]),
                                   RemoteFile(f"{folder}/hosts", cluster_files.hostfile(nodes))])
    except XeonClusterError as exc:
        run.note(f"could not start the next job ahead of the change ({exc.one_line()}); it starts after it")
        return None
    ahead = Ahead(run, plan, on_event).start()
    held = ahead.wait_held(max(0.0, within))
    names = ", ".join(n.name for n in nodes)
    if held:
        run.note(f"the next job is ready on {names}, held until the change")
    elif ahead.outcome is None and within <= 0:
        run.note(f"the next job starts on {names} as the change begins (the notice's time is up); the change "
                 "releases it")
    elif ahead.outcome is None:
        run.note(f"the next job, started on {names}, is not ready after {within:.0f}s; the change releases it")
    else:
        run.note(f"the next job, started ahead on {names}, ended (exit code {ahead.outcome.exit_code}); the run "
                 "starts again after the change instead")
        ahead.drop(shell)
        return None
    return ahead
