"""Checkpoints written in the background (--async-save), on the demo model in this process: they hold
what a synchronous save writes, resuming from one continues the same loss curve, a write cut short is
never taken for a checkpoint, a save waits for the write before it, and train() (a stop, the end)
returns only once the last write is complete and reported."""
from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from xeoncluster.node.checkpoints import checkpoint_writer
from xeoncluster.node.checkpoints.interruption import NoticeWatcher, StopOnNotice, WatchSettings
from xeoncluster.node.checkpoints.resume_point import is_complete, last_complete_checkpoint
from xeoncluster.node.events.event_reporter import EventReporter
from xeoncluster.node.startup.cli import parse
from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.startup.run_config import from_args
from xeoncluster.node.startup.stack_check import StackPlan
from xeoncluster.node.startup.trainer_setup import make_trainer, training_arguments

SINGLE = StackPlan(stack="stock", backend=None, use_ipex=False)


def _trainer(demo_dir: Path, out: Path, *options: str) -> Any:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed

    args, overrides = parse(["glue", "--demo", str(demo_dir), "--output-dir", str(out), "--logging_steps", "1",
                             *options])
    arguments = training_arguments(from_args(args, overrides), SINGLE, "fp32")
    set_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(demo_dir / "model"), num_labels=2)
    tokenizer = AutoTokenizer.from_pretrained(str(demo_dir / "model"))
    generator = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(5, 100, (16,), generator=generator).tolist(), "attention_mask": [1] * 16,
             "labels": i % 2} for i in range(64)]
    return make_trainer(arguments, model, tokenizer, (rows, None), SINGLE, "fp32")


def _losses(trainer: Any) -> dict[int, float]:
    return {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[int, bool]]:
    """Each checkpoint event: its step, and whether that checkpoint was complete on disk when it came."""
    seen: list[tuple[int, bool]] = []

    def emit(event: Any) -> None:
        if event.kind == "checkpoint":
            seen.append((event.step, is_complete(tmp_path / "run" / f"checkpoint-{event.step}")))

    monkeypatch.setattr("xeoncluster.node.events.event_reporter.emit", emit)
    return seen


def _slow_writes(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[tuple[int, float, float]]:
    """Every write takes `seconds` longer; returns (step, start, end) of each write."""
    spans: list[tuple[int, float, float]] = []
    write = checkpoint_writer.write_checkpoint

    def slow(snapshot: Any) -> None:
        start = time.monotonic()
        time.sleep(seconds)
        write(snapshot)
        spans.append((snapshot.step, start, time.monotonic()))

    monkeypatch.setattr(checkpoint_writer, "write_checkpoint", slow)
    return spans


def test_an_async_checkpoint_holds_what_a_sync_one_writes(demo_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    for mode, flag in (("sync", "--no-async-save"), ("async", "--async-save")):
        _trainer(demo_dir, tmp_path / mode, "--max-steps", "4", "--save-steps", "2", flag).train()
    sync, written = tmp_path / "sync" / "checkpoint-4", tmp_path / "async" / "checkpoint-4"
    assert sorted(p.name for p in written.iterdir()) == sorted(p.name for p in sync.iterdir())
    a, b = load_file(sync / "model.safetensors"), load_file(written / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    opt_a, opt_b = torch.load(sync / "optimizer.pt"), torch.load(written / "optimizer.pt")
    assert opt_a["param_groups"] == opt_b["param_groups"]
    moments = [(i, k) for i in opt_a["state"] for k in opt_a["state"][i]]
    assert all(torch.equal(opt_a["state"][i][k], opt_b["state"][i][k]) for i, k in moments)
    assert torch.load(sync / "scheduler.pt") == torch.load(written / "scheduler.pt")
    rng_a, rng_b = (torch.load(d / "rng_state.pth", weights_only=False) for d in (sync, written))
    assert rng_a["python"] == rng_b["python"] and torch.equal(rng_a["cpu"], rng_b["cpu"])
    assert (sync / "config.json").read_text() == (written / "config.json").read_text()
    state_a, state_b = (json.loads((d / "trainer_state.json").read_text()) for d in (sync, written))
    assert (state_a["global_step"], state_a["stateful_callbacks"]) == (state_b["global_step"],
                                                                       state_b["stateful_callbacks"])


def test_resuming_from_an_async_checkpoint_continues_the_loss_curve(demo_dir: Path, tmp_path: Path) -> None:
    plain = _trainer(demo_dir, tmp_path / "plain", "--max-steps", "6", "--no-async-save")
    plain.train()
    out = tmp_path / "async"
    _trainer(demo_dir, out, "--max-steps", "6", "--save-steps", "3", "--async-save").train()
    shutil.rmtree(out / "checkpoint-6")  # as if the run had been lost after step 3's checkpoint
    resumed = _trainer(demo_dir, out, "--max-steps", "6", "--save-steps", "3", "--async-save")
    resumed.train(resume_from_checkpoint=str(last_complete_checkpoint(out)))
    expected, after = _losses(plain), _losses(resumed)  # the resumed history starts with the checkpoint's
    assert sorted(after) == [1, 2, 3, 4, 5, 6]
    assert [after[s] for s in (4, 5, 6)] == pytest.approx([expected[s] for s in (4, 5, 6)], rel=1e-5)


class LocalShell:
    """The agent's NodeShell, run here: every node is this machine."""

    def run(self, nodes: list[Any], command: str) -> dict[str, Any]:
        from xeoncluster.remote.shell import CommandResult

        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
        return {n.name: CommandResult(n.name, proc.returncode, proc.stdout, proc.stderr) for n in nodes}


def _agent_sees(out: Path) -> list[int]:
    from xeoncluster.agent.recovery import checkpoint_steps
    from xeoncluster.providers.base import Node

    node = Node(name="node0", id="n0", private_ip="10.0.0.1", ssh_host="node0", role="master", market="on-demand")
    return checkpoint_steps(LocalShell(), [node], str(out))["node0"]  # type: ignore[arg-type]


def _fail_writing(monkeypatch: pytest.MonkeyPatch, step: int, file: str) -> None:
    """The write of `file` into checkpoint-`step` stops halfway, as a kill or a full disk leaves it."""
    staged, save = checkpoint_writer._staged, torch.save

    def cut_short(target: Any) -> bool:
        return Path(str(target)).parent.name == f"checkpoint-{step}" and Path(str(target)).name == file

    def failing_staged(target: Path, write: Callable[[Path], object]) -> None:
        if cut_short(target):
            write(target.with_name(f".{target.name}.partial"))
            raise OSError(28, "No space left on device")
        staged(target, write)

    def failing_save(value: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if cut_short(target):
            Path(target).write_bytes(b"PK")
            raise OSError(28, "No space left on device")
        save(value, target, *args, **kwargs)

    monkeypatch.setattr(checkpoint_writer, "_staged", failing_staged)
    monkeypatch.setattr(torch, "save", failing_save)


@pytest.mark.parametrize("file", ["optimizer.pt", "model.safetensors", "trainer_state.json"])
def test_a_write_cut_short_is_never_taken_for_a_checkpoint(demo_dir: Path, tmp_path: Path, file: str,
                                                           events: list[tuple[int, bool]],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    trainer = _trainer(demo_dir, out, "--max-steps", "4", "--save-steps", "2", "--async-save")
    trainer.add_callback(EventReporter("10.0.0.1"))
    _fail_writing(monkeypatch, 4, file)
    with pytest.raises(TrainingError, match="writing checkpoint-4 failed: OSError"):
        trainer.train()
    assert (out / "checkpoint-4" / file).exists() or (out / "checkpoint-4" / f".{file}.partial").exists()
    assert not is_complete(out / "checkpoint-4")
    assert last_complete_checkpoint(out) == out / "checkpoint-2"
    assert _agent_sees(out) == [2]
    assert events == [(2, True)]


def test_a_folder_written_again_is_incomplete_until_the_write_ends(demo_dir: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    _trainer(demo_dir, out, "--max-steps", "2", "--save-steps", "2", "--async-save").train()
    assert is_complete(out / "checkpoint-2")  # as a run killed after this save leaves it
    _fail_writing(monkeypatch, 2, "model.safetensors")
    with pytest.raises(TrainingError):
        _trainer(demo_dir, out, "--max-steps", "2", "--save-steps", "2", "--async-save").train()
    assert last_complete_checkpoint(out) is None and _agent_sees(out) == []


def test_a_save_waits_for_the_write_before_it_and_each_is_reported_once_complete(
        demo_dir: Path, tmp_path: Path, events: list[tuple[int, bool]], monkeypatch: pytest.MonkeyPatch) -> None:
    spans = _slow_writes(monkeypatch, 0.4)
    trainer = _trainer(demo_dir, tmp_path / "run", "--max-steps", "4", "--save-steps", "1", "--async-save")
    trainer.add_callback(EventReporter("10.0.0.1"))
    trainer.train()
    assert [s for s, _, _ in spans] == [1, 2, 3, 4]
    assert all(later[1] >= earlier[2] for earlier, later in itertools.pairwise(spans))  # one in flight
    assert events == [(1, True), (2, True), (3, True), (4, True)]
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]


def test_a_stop_returns_only_once_its_checkpoint_is_written(demo_dir: Path, tmp_path: Path,
                                                          events: list[tuple[int, bool]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    spans = _slow_writes(monkeypatch, 1.0)
    out = tmp_path / "run"
    trainer = _trainer(demo_dir, out, "--max-steps", "50", "--save-steps", "1000", "--async-save")
    watcher = NoticeWatcher(WatchSettings(()), 0, "10.0.0.1")
    stop = StopOnNotice(watcher)
    trainer.add_callback(stop)
    trainer.add_callback(EventReporter("10.0.0.1"))
    watcher.stop_reason = "stop requested"
    trainer.train()
    assert stop.stopped_at == 1
    assert [s for s, _, _ in spans] == [1] and is_complete(out / "checkpoint-1")
    assert events == [(1, True)]
