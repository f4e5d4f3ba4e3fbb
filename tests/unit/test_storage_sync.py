"""StorageSync, the run agent's copy of a run into storage, on a real folder storage: a checkpoint is
durable only with its manifest (written last), only the newest K are kept, results and the model land
under their own keys, and a failing storage is retried and reported but never stops the caller."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from xeoncluster.agent import run_storage
from xeoncluster.agent.checkpoint_source import OnMaster
from xeoncluster.agent.run_storage import StorageSync
from xeoncluster.runs.stored_checkpoints import download_checkpoint, durable_steps
from xeoncluster.storage.base import MANIFEST, StorageLocation
from xeoncluster.storage.folder import FolderStorage


class Flaky(FolderStorage):
    """A folder storage whose first `fail` uploads raise, as a dropped connection does; it records
    the order of the keys it stored."""

    def __init__(self, location: StorageLocation, fail: int) -> None:
        super().__init__(location)
        self.fail, self.stored = fail, []

    def put_file(self, path: Path, key: str) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("connection reset")
        super().put_file(path, key)
        self.stored.append(key)


def run_folder(tmp_path: Path, steps: tuple[int, ...]) -> Path:
    run_dir = tmp_path / "master" / "run"
    for step in steps:
        folder = run_dir / f"checkpoint-{step}"
        (folder / "sub").mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(bytes([step % 256]) * 1000)
        (folder / "sub" / "rng.pth").write_bytes(b"r" * 10)
    return run_dir


def sync_for(tmp_path: Path, run_dir: Path, fail: int = 0, keep: int = 3) -> tuple[StorageSync, Flaky, list[str]]:
    storage = Flaky(StorageLocation(url=str(tmp_path / "store"), folder=str(tmp_path / "store")), fail)
    reports: list[str] = []
    return StorageSync(storage, "c1", "r1", OnMaster(run_dir), keep, [], reports.append), storage, reports


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_storage, "RETRY_DELAYS", (0, 0))


def test_the_manifest_is_written_last_and_only_the_newest_are_kept(tmp_path: Path) -> None:
    steps = (10, 20, 30, 40, 50)
    run_dir = run_folder(tmp_path, steps)
    sync, storage, reports = sync_for(tmp_path, run_dir, keep=3)
    for step in steps:
        sync.checkpoint(step)
    assert sync.close(30) and sync.failures == 0 and reports == []
    base = "c1/runs/r1"
    assert durable_steps(storage, base) == [30, 40, 50] and sync.durable == 50
    first = [k for k in storage.stored if "checkpoint-10/" in k]
    assert first[-1].endswith(MANIFEST) and len(first) == 3
    manifest = json.loads(storage.get_text(f"{base}/checkpoints/checkpoint-50/{MANIFEST}") or "")
    assert manifest == {"step": 50, "files": {"model.safetensors": 1000, "sub/rng.pth": 10}}
    assert not (tmp_path / "store" / base / "checkpoints" / "checkpoint-10").exists()
    assert not (run_dir / ".xc-storage" / "checkpoint-50").exists()   # the snapshot is released


def test_a_checkpoint_without_its_manifest_is_not_durable(tmp_path: Path) -> None:
    storage = FolderStorage(StorageLocation(url="x", folder=str(tmp_path)))
    (tmp_path / "c1/runs/r1/checkpoints/checkpoint-90").mkdir(parents=True)
    (tmp_path / "c1/runs/r1/checkpoints/checkpoint-90/model.safetensors").write_text("half")
    (tmp_path / "c1/runs/r1/checkpoints/checkpoint-60").mkdir(parents=True)
    (tmp_path / "c1/runs/r1/checkpoints/checkpoint-60" / MANIFEST).write_text('{"step": 60, "files": {}}')
    assert durable_steps(storage, "c1/runs/r1") == [60]


def test_failed_uploads_are_retried_reported_and_the_checkpoint_still_lands(tmp_path: Path) -> None:
    run_dir = run_folder(tmp_path, (40,))
    sync, storage, reports = sync_for(tmp_path, run_dir, fail=2)
    sync.checkpoint(40)
    assert sync.close(30) and sync.failures == 0
    assert len(reports) == 2
    assert "storing checkpoint-40 failed (ConnectionError: connection reset); retrying" in reports[0]
    back = download_checkpoint(storage, "c1/runs/r1", 40, tmp_path / "back")
    assert (back / "sub" / "rng.pth").read_bytes() == b"r" * 10


def test_storage_that_never_answers_is_given_up_and_the_next_job_still_runs(tmp_path: Path) -> None:
    run_dir = run_folder(tmp_path, (40, 80))
    sync, storage, reports = sync_for(tmp_path, run_dir, fail=3)
    sync.checkpoint(40)
    sync.checkpoint(80)
    assert sync.close(30)
    assert sync.failures == 1 and reports[-1].endswith("giving up on it")
    assert durable_steps(storage, "c1/runs/r1") == [80] and sync.durable == 80


def test_results_and_model_land_under_their_own_keys(tmp_path: Path) -> None:
    run_dir = run_folder(tmp_path, ())
    (run_dir / "model").mkdir(parents=True)
    (run_dir / "model" / "config.json").write_text("{}")
    (run_dir / "metrics.json").write_text('{"f1": 1}')
    (run_dir / "unrelated.bin").write_text("no")
    log = tmp_path / "train.log"
    log.write_text("line\n")
    sync, storage, _ = sync_for(tmp_path, run_dir)
    sync.logs = [log]
    sync.results()
    assert sync.close(30)
    keys = {o.key for o in storage.objects("c1/runs/r1")}
    assert keys == {"c1/runs/r1/results/metrics.json", "c1/runs/r1/model/config.json", "c1/runs/r1/train.log"}


def test_folder_storage_keys_cannot_leave_the_folder(tmp_path: Path) -> None:
    storage = FolderStorage(StorageLocation(url="x", folder=str(tmp_path / "store")))
    with pytest.raises(ValueError, match="leaves"):
        storage.put_text("../outside.txt", "x")


def test_resume_from_a_named_cluster_copies_the_checkpoint_under_its_own_prefix(tmp_path: Path) -> None:
    from xeoncluster.cluster.command_context import CommandContext
    from xeoncluster.cluster.state import StateDir
    from xeoncluster.commands.train.train_storage import stored_checkpoint
    from xeoncluster.core.progress import Reporter
    from xeoncluster.providers.config import ClusterConfig
    from xeoncluster.providers.local.provider import LocalProvider

    run_dir = run_folder(tmp_path, (40, 80))
    sync, storage, _ = sync_for(tmp_path, run_dir)
    sync.checkpoint(40)
    sync.checkpoint(80)
    assert sync.close(30)
    config = ClusterConfig.model_validate({"name": "c2", "provider": "local"})
    ctx = CommandContext(config, StateDir("c2", tmp_path / "home"), LocalProvider(tmp_path / "root"), Reporter())
    assert stored_checkpoint(ctx, storage.location, "r1") is None  # c1's run, not named: not taken
    assert durable_steps(storage, "c2/runs/r1") == []
    assert stored_checkpoint(ctx, storage.location, "r1", source="c1") == 80
    assert durable_steps(storage, "c2/runs/r1") == [80]
    assert durable_steps(storage, "c1/runs/r1") == [40, 80]   # the other cluster's copy stays
    assert stored_checkpoint(ctx, storage.location, "nothing-like-it", source="c1") is None


class Hanging(FolderStorage):
    """A storage whose uploads hang until released, as a server that takes a request and never answers."""

    def __init__(self, location: StorageLocation) -> None:
        super().__init__(location)
        self.release = threading.Event()

    def put_file(self, path: Path, key: str) -> None:
        self.release.wait(30)
        super().put_file(path, key)


def test_an_upload_that_hangs_is_reported_with_the_agent_s_stacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(run_storage, "SLOW_SECONDS", 0.3)
    run_dir = run_folder(tmp_path, (10,))
    storage = Hanging(StorageLocation(url=str(tmp_path / "store"), folder=str(tmp_path / "store")))
    reports: list[str] = []
    sync = StorageSync(storage, "c1", "r1", OnMaster(run_dir), 3, [], reports.append)
    sync.checkpoint(10)
    deadline = time.monotonic() + 10
    while not reports and time.monotonic() < deadline:
        time.sleep(0.05)
    storage.release.set()
    assert sync.close(10) and sync.durable == 10
    assert reports == ["storing checkpoint-10 has taken over 0s so far; the agent's log has its threads' stacks"]
    assert "in put_file" in capfd.readouterr().err  # the hanging call, named in the dumped stacks


def test_a_checkpoint_rotated_away_before_its_turn_is_skipped_not_retried(tmp_path: Path) -> None:
    """Behind a slow upload the Trainer may delete a queued checkpoint (it keeps the newest two).
    Retrying it cannot work, and its waits made every later one late too, until none was stored."""
    run_dir = run_folder(tmp_path, (10, 20))
    sync, storage, reports = sync_for(tmp_path, run_dir)
    import shutil

    shutil.rmtree(run_dir / "checkpoint-10")
    sync.checkpoint(10)
    sync.checkpoint(20)
    assert sync.close(30)
    assert durable_steps(storage, "c1/runs/r1") == [20] and sync.failures == 0
    assert reports == ["checkpoint-10 was replaced by a newer one before it could be stored; skipped"], reports
