"""The run's end on the agent: metrics.json on the master gains the restarts, lost steps and cost before
the results are stored, and `train` fetches that file as it is, so the copy in storage and the one in the
results folder are the same bytes. A run that wrote no metrics.json gets none."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from xeoncluster.agent import run_storage
from xeoncluster.agent import supervisor as supervisor_module
from xeoncluster.agent.attempt import Attempt, Outcome
from xeoncluster.agent.supervisor import Supervisor
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import StateDir
from xeoncluster.commands.train.train_results import fetch_results
from xeoncluster.core.progress import Reporter
from xeoncluster.core.stacks import get_stack
from xeoncluster.job.train_plan import build_plan
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.node.events.events import CheckpointEvent, NoticeEvent, StartedEvent, StepEvent
from xeoncluster.providers.base import Node
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.local.provider import LocalProvider
from xeoncluster.remote.shell import CommandResult, RemoteFile
from xeoncluster.runs.record import Restart, RunFiles, RunRecord, RunState
from xeoncluster.runs.submission import Submission
from xeoncluster.storage.base import StorageLocation
from xeoncluster.topology import CpuTopology

MASTER = Node("node0", "n0", "10.0.0.2", "10.0.0.2", "master", "local")


class FolderShell:
    """A master whose login home is a folder here: commands run in bash there, files are copied."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        done = subprocess.run(["bash", "-c", command], cwd=self.home, capture_output=True, text=True)
        return {nodes[0].name: CommandResult(nodes[0].name, done.returncode, done.stdout, done.stderr)}

    def put_files(self, node: Node, files: list[RemoteFile]) -> None:
        for item in files:
            (self.home / item.path).write_text(item.text)

    def get(self, node: Node, remote_path: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes((self.home / remote_path).read_bytes())

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_storage, "RETRY_DELAYS", (0, 0))


def supervisor(tmp_path: Path, shell: FolderShell) -> Supervisor:
    """The agent of run r1 on cluster c1, which lost node1 once, storing into a folder."""
    config = ClusterConfig.model_validate({"name": "c1", "provider": "local"})
    ctx = CommandContext(config, StateDir("c1", tmp_path / "home"), LocalProvider(tmp_path / "root"), Reporter(),
                         shell_factory=lambda _identity: shell)  # type: ignore[arg-type,return-value]
    request = TaskRequest(task="squad", demo=True)
    plan = build_plan(request, get_stack("stock"), [MASTER], CpuTopology(1, 2, 1, 1, 2), str(shell.home), "r1", {})
    store = str(tmp_path / "store")
    files = RunFiles(tmp_path / "agent" / "r1")
    restart = Restart(node="node1", reason="gone", from_step=40, seconds=3.2, lost_steps=17, replacement="node1")
    files.save(RunRecord(run="r1", cluster="c1", task="squad", state=RunState.RUNNING, restarts=[restart],
                         cost_usd=0.1234567891))
    agent = Supervisor(ctx, files, Submission(request, plan, StorageLocation(url=store, folder=store)))
    agent.storage.start(shell, agent.plan)  # type: ignore[arg-type]
    return agent


def test_storage_and_the_results_folder_hold_the_agents_metrics_json(tmp_path: Path) -> None:
    shell = FolderShell(tmp_path / "node")
    run_dir = shell.home / "xeoncluster" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps({"f1": 80.5, "global_steps": 400}, indent=2) + "\n")
    agent = supervisor(tmp_path, shell)
    assert agent.finish(RunState.SUCCEEDED, 0) == 0
    stored = (tmp_path / "store" / "c1" / "runs" / "r1" / "results" / "metrics.json").read_bytes()
    metrics = json.loads(stored)
    assert metrics["f1"] == 80.5 and metrics["lost_steps"] == 17 and metrics["cost_usd"] == 0.123457
    assert [r["node"] for r in metrics["restarts"]] == ["node1"] and metrics["restarts"][0]["from_step"] == 40
    fetched = fetch_results(shell, MASTER, "r1", tmp_path / "results", None)  # type: ignore[arg-type]
    assert fetched.metrics_path.read_bytes() == stored == (run_dir / "metrics.json").read_bytes()
    assert fetched.metrics == metrics
    assert not (run_dir / ".xc-metrics.json").exists()


def test_a_run_that_wrote_no_metrics_gets_none(tmp_path: Path) -> None:
    shell = FolderShell(tmp_path / "node")
    run_dir = shell.home / "xeoncluster" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    agent = supervisor(tmp_path, shell)
    assert agent.finish(RunState.SUCCEEDED, 0) == 0
    assert not (run_dir / "metrics.json").exists()
    assert not (tmp_path / "store" / "c1" / "runs" / "r1" / "results").exists()
    assert RunFiles(tmp_path / "agent" / "r1").load().state is RunState.SUCCEEDED  # type: ignore[union-attr]


def test_the_record_says_succeeded_only_once_the_results_are_stored(tmp_path: Path) -> None:
    """`train` returns, and `down` is allowed, as soon as the record says the run ended: by then its
    results must be in storage (CI once saw `down` take the master while they uploaded)."""
    shell = FolderShell(tmp_path / "node")
    run_dir = shell.home / "xeoncluster" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps({"f1": 80.5}) + "\n")
    agent = supervisor(tmp_path, shell)
    stored = tmp_path / "store" / "c1" / "runs" / "r1" / "results" / "metrics.json"
    seen: list[tuple[RunState, bool]] = []
    original = agent.keeper.ended  # the one change of the record's state on the way to the end

    def watching(state: RunState, exit_code: int, error: str, durable_step: int | None) -> None:
        original(state, exit_code, error, durable_step)
        seen.append((agent.record.state, stored.exists()))

    agent.keeper.ended = watching  # type: ignore[method-assign]
    agent.finish(RunState.SUCCEEDED, 0)
    assert seen == [(RunState.SUCCEEDED, True)]


def test_the_ranks_events_reach_the_record_through_its_typed_changes(tmp_path: Path) -> None:
    """The supervisor's watches (agent/run_watches.py) turn events into the record's changes."""
    shell = FolderShell(tmp_path / "node")
    (shell.home / "xeoncluster" / "runs" / "r1").mkdir(parents=True)
    agent = supervisor(tmp_path, shell)
    agent.watches.on_event(StartedEvent(step=0, total=10))
    agent.watches.on_event(StepEvent(time=1.0, step=4, loss=0.5))
    agent.watches.on_event(NoticeEvent(rank=1, node="10.9.9.9", reason="spot interruption notice"))
    record = RunFiles(tmp_path / "agent" / "r1").load()
    assert record is not None
    assert (record.step, record.total_steps, record.live.loss, record.notices) == (4, 10, 0.5, ["10.9.9.9"])


class QuietWatch:
    """A watch that sees nothing: the nodes' use and their presence are not what this test is about."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        pass

    def __enter__(self) -> QuietWatch:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass


def test_the_supervisors_loop_runs_a_launch_to_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop across its parts (the queue turn, the attempt, the watches, the end), with a launch whose
    ranks report a start, a step and a checkpoint and exit 0."""
    def launch(attempt: Attempt, _shell: object) -> Outcome:
        for event in (StartedEvent(step=0, total=8), StepEvent(time=1.0, step=8, loss=0.25),
                      CheckpointEvent(step=8, total=8)):
            attempt.on_event(event)
        return Outcome(0)

    monkeypatch.setattr(Attempt, "run", launch)
    monkeypatch.setattr(supervisor_module, "UsageWatch", QuietWatch)
    monkeypatch.setattr(supervisor_module, "NodeWatch", QuietWatch)
    shell = FolderShell(tmp_path / "node")
    (shell.home / "xeoncluster" / "runs" / "r1" / "checkpoint-8").mkdir(parents=True)
    (shell.home / "xeoncluster" / "runs" / "r1" / "checkpoint-8" / "trainer_state.json").write_text("{}")
    agent = supervisor(tmp_path, shell)
    assert agent.run() == 0
    record = RunFiles(tmp_path / "agent" / "r1").load()
    assert record is not None
    assert (record.state, record.step, record.total_steps, record.nodes) == (RunState.SUCCEEDED, 8, 8, ["node0"])
    assert record.started_at is not None and record.ended_at is not None and record.exit_code == 0
