"""The run queue without a cluster: the records in a runs folder are the queue, agents take their turn
under a lock, a dead agent holds up nobody, and what the CLI reads (the line, the busy line, the
idle check) sees queued runs. Agents are real processes here, named as agents are."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from xeoncluster.agent.activity import Activity
from xeoncluster.agent.queue import SUBMITTED_GRACE_SECONDS, Queue
from xeoncluster.runs import client
from xeoncluster.runs.host import LocalHost
from xeoncluster.runs.queue_order import busy_line, place_line
from xeoncluster.runs.record import RunFiles, RunRecord, RunState

CLUSTER = "qc"


@pytest.fixture
def agents() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def agent(agents: list[subprocess.Popen[bytes]], run: str) -> int:
    """A process whose command line is a run agent's, as /proc shows it."""
    proc = subprocess.Popen(["bash", "-c", f'exec -a "python -m xeoncluster.agent run {CLUSTER} {run}" sleep 60'])
    agents.append(proc)
    return proc.pid


def write(runs: Path, run: str, state: RunState, at: float, pid: int | None) -> None:
    (runs / run).mkdir(parents=True, exist_ok=True)
    RunFiles(runs / run).save(RunRecord(run=run, cluster=CLUSTER, task="squad", state=state, submitted_at=at,
                                        agent_pid=pid))


def runs_folder(home: Path) -> Path:
    return home / "clusters" / CLUSTER / "runs"


def test_runs_wait_for_the_started_run_and_for_those_submitted_before_them(tmp_path: Path, agents: list) -> None:
    runs = runs_folder(tmp_path)
    now = time.time()
    write(runs, "a", RunState.RUNNING, now - 50, agent(agents, "a"))
    write(runs, "b", RunState.QUEUED, now - 40, agent(agents, "b"))
    write(runs, "c", RunState.QUEUED, now - 30, agent(agents, "c"))
    write(runs, "old", RunState.SUCCEEDED, now - 90, None)
    queue = Queue(runs)
    assert [r.run for r in queue.ahead_of("c")] == ["a", "b"]
    assert [r.run for r in queue.ahead_of("b")] == ["a"]
    assert place_line("c", queue.ahead_of("c")) == "run c queued: 3rd in line, after b"
    started: list[str] = []
    assert queue.take_turn("b", lambda: started.append("b")).ahead and started == []
    write(runs, "a", RunState.SUCCEEDED, now - 50, None)
    assert queue.take_turn("c", lambda: started.append("c")).ahead and started == [], "b was submitted first"
    assert queue.take_turn("b", lambda: started.append("b")).taken and started == ["b"]


def test_an_agent_that_died_or_a_train_that_never_started_one_holds_up_nobody(tmp_path: Path, agents: list) -> None:
    runs = runs_folder(tmp_path)
    now = time.time()
    dead = subprocess.Popen(["true"])
    dead.wait()
    write(runs, "crashed", RunState.RUNNING, now - 60, dead.pid)
    stranger = subprocess.Popen(["sleep", "60"])  # alive, but no agent: the recorded pid was reused
    agents.append(stranger)
    write(runs, "reused", RunState.QUEUED, now - 50, stranger.pid)
    write(runs, "abandoned", RunState.SUBMITTED, now - SUBMITTED_GRACE_SECONDS - 1, None)
    write(runs, "just-written", RunState.SUBMITTED, now - 5, None)
    write(runs, "mine", RunState.QUEUED, now, agent(agents, "mine"))
    assert [r.run for r in Queue(runs).ahead_of("mine")] == ["just-written"]


def test_one_turn_at_a_time_under_the_lock(tmp_path: Path, agents: list) -> None:
    """Two agents whose turn comes at once: exactly one starts."""
    runs = runs_folder(tmp_path)
    now = time.time()
    for run in ("x", "y"):
        write(runs, run, RunState.QUEUED, now, agent(agents, run))
    started: list[str] = []

    def start(run: str) -> None:
        time.sleep(0.2)  # inside the lock: the other must wait and then see this run started
        write(runs, run, RunState.STARTING, now, agents[0].pid if run == "x" else agents[1].pid)
        started.append(run)

    threads = [threading.Thread(target=Queue(runs).take_turn, args=(run, lambda run=run: start(run)))
               for run in ("y", "x")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert started == ["x"], "x was submitted first (same time: by name)"


def test_the_cli_sees_the_queue_and_the_idle_check_counts_it(tmp_path: Path, agents: list) -> None:
    runs = runs_folder(tmp_path)
    now = time.time()
    write(runs, "q1", RunState.QUEUED, now - 10, agent(agents, "q1"))
    write(runs, "q2", RunState.QUEUED, now - 5, agent(agents, "q2"))
    host = LocalHost(str(tmp_path), sys.executable)
    line = client.line(host, CLUSTER)
    assert [r.run for r in line] == ["q1", "q2"] and client.active_run(host, CLUSTER) is None
    assert busy_line(line) == "2 queued: q1, q2"
    ctx = SimpleNamespace(config=SimpleNamespace(name=CLUSTER),
                          state=SimpleNamespace(holder=lambda: None, load=lambda: None))
    assert Activity(ctx, host, None).busy() == "2 queued: q1, q2"  # type: ignore[arg-type]
    write(runs, "q1", RunState.RUNNING, now - 10, agents[0].pid)
    assert busy_line(client.line(host, CLUSTER)) == "run q1 is running (step 0); 1 queued: q2"
    for proc in agents:
        proc.kill()
        proc.wait()
    assert client.line(host, CLUSTER) == [] and Activity(ctx, host, None).busy() == ""  # type: ignore[arg-type]


def test_a_queued_run_left_behind_is_named_with_the_command_that_submits_it_again() -> None:
    from xeoncluster.commands.runs import _orphan_note

    command = "xeoncluster train squad --name qc --demo --run r2 -- --lr 1e-4"
    queued = RunRecord(run="r2", cluster=CLUSTER, task="squad", state=RunState.QUEUED, command=command)
    assert _orphan_note(queued, "its cluster or master went first") == (
        f"run r2 was queued and never started (its cluster or master went first): submit it again with `{command}`")
    forged = queued.model_copy(update={"command": "xeoncluster train\x1b]0;pwned\x07"})
    assert "submit it again" not in _orphan_note(forged, "gone"), "the master's text is shown only when printable"
    running = queued.model_copy(update={"state": RunState.RUNNING, "step": 40})
    assert _orphan_note(running, "its agent is gone") == "run r2: its agent is gone; it stopped at step 40"


def test_at_a_deadline_the_queue_is_emptied_and_the_runs_that_never_started_are_named(tmp_path: Path,
                                                                                       agents: list) -> None:
    from xeoncluster.agent.self_removal import SelfRemoval

    runs = runs_folder(tmp_path)
    now = time.time()
    write(runs, "q1", RunState.QUEUED, now - 10, agent(agents, "q1"))
    write(runs, "q2", RunState.QUEUED, now - 5, agent(agents, "q2"))
    write(runs, "done", RunState.SUCCEEDED, now - 50, None)
    reports: list[str] = []
    ctx = SimpleNamespace(config=SimpleNamespace(name=CLUSTER))
    removal = SelfRemoval(ctx, LocalHost(str(tmp_path), sys.executable), reports.append)  # type: ignore[arg-type]
    assert removal._stop_runs() == ["q1", "q2"]
    assert reports == ["queued runs that never started: q1, q2"]
    assert (runs / "q1" / "cancel").exists() and (runs / "q2" / "cancel").exists()
    assert not (runs / "done" / "cancel").exists()
