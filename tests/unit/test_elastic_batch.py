"""Issue 37: a run on fewer (or more) ranks than its global batch was set for keeps that batch."""
from __future__ import annotations

import pytest

from xeoncluster.node.startup.elastic_batch import BatchShape, elastic_settings, reshape


@pytest.mark.parametrize(("given", "set_for", "world", "expected"), [
    (BatchShape(16, 1), 2, 1, BatchShape(16, 2)),   # half the ranks: twice the accumulation
    (BatchShape(16, 1), 3, 2, BatchShape(12, 2)),   # 48 over 2: the largest per-rank batch that divides 24
    (BatchShape(8, 2), 4, 2, BatchShape(8, 4)),
    (BatchShape(16, 2), 1, 2, BatchShape(16, 1)),   # grown back past the first launch's world
])
def test_the_global_batch_is_kept_where_the_world_divides_it(given, set_for, world, expected) -> None:
    shape, line = reshape(given, set_for, world)
    assert shape == expected and shape.global_batch(world) == given.global_batch(set_for)
    assert f"global batch {given.global_batch(set_for)} kept on {world} ranks" in line


def test_a_batch_the_world_does_not_divide_takes_the_nearest_and_says_so() -> None:
    shape, line = reshape(BatchShape(1, 1), 3, 2)
    assert shape == BatchShape(1, 2)
    assert line.startswith("global batch 4 on 2 ranks instead of 3") and "does not divide" in line


def test_the_world_it_was_set_for_changes_nothing() -> None:
    assert reshape(BatchShape(16, 1), 2, 2) == (BatchShape(16, 1), "")


def test_the_trainer_settings_follow_the_launch_environment() -> None:
    settings = {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 1}
    assert elastic_settings(settings, {}) == ({}, "")
    assert elastic_settings(settings, {"XC_BATCH_WORLD": "2", "WORLD_SIZE": "2"})[0] == {
        "per_device_train_batch_size": 16, "gradient_accumulation_steps": 1}
    changed, line = elastic_settings(settings, {"XC_BATCH_WORLD": "2"})  # one rank: no WORLD_SIZE exported
    assert changed == {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 2} and line
    assert elastic_settings(settings, {"XC_BATCH_WORLD": "two"}) == ({}, "")


def test_a_checkpoint_of_another_world_gives_rank_0_its_rng_state(tmp_path) -> None:
    from xeoncluster.node.checkpoints.node_checkpoint import rng_state_for_world

    (tmp_path / "rng_state_0.pth").write_bytes(b"rank0")
    (tmp_path / "rng_state_1.pth").write_bytes(b"rank1")
    assert rng_state_for_world(tmp_path, 0, 1) == tmp_path / "rng_state.pth"  # shrunk to one rank
    assert (tmp_path / "rng_state.pth").read_bytes() == b"rank0"
    grown = tmp_path / "grown"
    grown.mkdir()
    (grown / "rng_state.pth").write_bytes(b"alone")
    assert rng_state_for_world(grown, 0, 2) == grown / "rng_state_0.pth"
    assert rng_state_for_world(grown, 1, 2) is None and not (grown / "rng_state_1.pth").exists()
    assert rng_state_for_world(tmp_path, 1, 2) is None  # its own is there
