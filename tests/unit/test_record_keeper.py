"""The agent's typed changes of a run's record (agent/record_keeper.py): each is saved at once with the
cost so far, and run.json keeps the flat keys every CLI and agent version reads."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from xeoncluster.agent import record_keeper
from xeoncluster.agent.record_keeper import RecordKeeper
from xeoncluster.runs.record import Live, NodeUse, Restart, RunFiles, RunRecord, RunState


def keeper(tmp_path: Path) -> RecordKeeper:
    files = RunFiles(tmp_path / "r1")
    files.path.mkdir()
    record = RunRecord(run="r1", cluster="c1", task="squad")
    files.save(record)
    return RecordKeeper(files, record)


def saved(kept: RecordKeeper) -> RunRecord:
    record = kept.files.load()
    assert record is not None
    return record


def test_a_runs_life_is_saved_change_by_change(tmp_path: Path) -> None:
    kept = keeper(tmp_path)
    kept.queued()
    assert saved(kept).state is RunState.QUEUED and saved(kept).agent_pid is not None
    kept.started("s3://bucket/c1/runs/r1")
    assert (saved(kept).state, saved(kept).storage) == (RunState.STARTING, "s3://bucket/c1/runs/r1")
    kept.running(["node0", "node1"], 2, 2)
    kept.noticed("10.0.0.3")
    kept.noticed("10.0.0.2")
    kept.noticed("10.0.0.3")
    kept.progress(7, 10, Live(loss=0.5))
    kept.used({"node0": NodeUse(cpu_percent=90.0)}, Live(loss=0.4))
    record = saved(kept)
    assert (record.state, record.nodes, record.notices) == (RunState.RUNNING, ["node0", "node1"],
                                                             ["10.0.0.2", "10.0.0.3"])
    assert (record.step, record.total_steps, record.live.loss, record.usage["node0"].cpu_percent) == (7, 10, 0.4, 90.0)
    kept.recovering()
    kept.stalled()
    kept.restarted(Restart(node="node1", reason="gone", from_step=5, seconds=3.0, lost_steps=2))
    kept.prepared(1.5)
    kept.stored(5)
    kept.storage_failed("upload failed")
    record = saved(kept)
    assert (record.state, record.stalls, record.durable_step, record.storage_error) == (
        RunState.RECOVERING, 1, 5, "upload failed")
    assert [(r.node, r.prepare_seconds) for r in record.restarts] == [("node1", 1.5)]
    kept.ending()
    kept.ended(RunState.FAILED, 3, "lost", 5)
    record = saved(kept)
    assert (record.state, record.exit_code, record.error, record.ended_at is not None) == (
        RunState.FAILED, 3, "lost", True)


def test_a_run_cancelled_in_the_queue_ends_unstarted(tmp_path: Path) -> None:
    kept = keeper(tmp_path)
    kept.cancelled_unstarted()
    record = saved(kept)
    assert (record.state, record.exit_code, record.error) == (RunState.CANCELLED, 130, "cancelled before it started")
    assert record.started_at is None and record.ended_at is not None


def test_every_change_carries_the_cost_so_far(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(record_keeper.time, "time", lambda: now[0])
    kept = keeper(tmp_path)
    kept.priced(3.6)  # $3.60 an hour: a tenth of a cent a second
    now[0] += 100
    kept.progress(1, 10, Live())
    assert saved(kept).cost_usd == pytest.approx(0.1)


def test_run_json_keeps_its_flat_keys(tmp_path: Path) -> None:
    """Older and newer CLIs read run.json as the flat record (wire/contract.py): the changes are typed
    here, the file is not reshaped."""
    kept = keeper(tmp_path)
    kept.running(["node0"], 1, 1)
    kept.progress(1, 2, Live(loss=1.0))
    on_disk = json.loads(kept.files.record.read_text())
    assert list(on_disk) == list(RunRecord.model_fields)
    assert on_disk["state"] == "running" and on_disk["step"] == 1 and on_disk["live"]["loss"] == 1.0
