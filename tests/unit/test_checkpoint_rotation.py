"""Checkpoint rotation on a node: only complete checkpoints count, so a folder still being written (or
left half written by a kill) never pushes out the newest complete one, which recovery needs."""
from __future__ import annotations

from pathlib import Path

from xeoncluster.node.checkpoints.resume_point import MARKERS, is_complete, last_complete_checkpoint, rotate


def _checkpoint(out: Path, step: int, complete: bool) -> Path:
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "optimizer.pt").write_bytes(b"x")
    for name in MARKERS if complete else MARKERS[:1]:
        (folder / name).write_text("{}")
    return folder


def _steps(out: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))


def test_an_unfinished_newer_folder_never_pushes_out_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    for step, complete in ((40, True), (80, True), (120, False)):
        _checkpoint(tmp_path, step, complete)
    rotate(tmp_path, 1)  # the Trainer's own rotation would keep 120 alone here, a folder no one can resume from
    assert _steps(tmp_path) == [80, 120]
    assert last_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-80"


def test_the_newest_complete_ones_are_kept_and_older_unfinished_folders_go(tmp_path: Path) -> None:
    for step, complete in ((10, False), (20, True), (30, False), (40, True), (50, True), (60, False)):
        _checkpoint(tmp_path, step, complete)
    rotate(tmp_path, 2)
    assert _steps(tmp_path) == [40, 50, 60]
    assert [is_complete(tmp_path / f"checkpoint-{s}") for s in (40, 50, 60)] == [True, True, False]


def test_nothing_goes_while_fewer_complete_checkpoints_than_the_limit_exist(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 10, False)
    _checkpoint(tmp_path, 20, True)
    rotate(tmp_path, 2)
    rotate(tmp_path, None)
    assert _steps(tmp_path) == [10, 20]
