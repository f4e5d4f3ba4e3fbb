"""`--warm-data`: what the run agent runs on a replacement while the run still trains, so that the
resumed rank finds its data and features ready instead of tokenizing on the critical path."""
from __future__ import annotations

from pathlib import Path

from .training_helpers import run_training


def test_warm_data_builds_the_features_the_rank_then_loads_and_trains_nothing(demo_dir: Path,
                                                                               tmp_path: Path) -> None:
    cache, out = tmp_path / "features", tmp_path / "run"
    common = ["--demo", str(demo_dir), "--cache-dir", str(cache), "--output-dir", str(out), "--max-steps", "2"]
    warmed = run_training(["squad", "--warm-data", *common])
    assert warmed.returncode == 0, warmed.stdout[-2000:] + warmed.stderr[-2000:]
    assert "features tokenized into cache" in warmed.stdout and "training features ready" in warmed.stdout
    assert [p.name for p in cache.iterdir()] != [] and not out.exists()  # no checkpoint, metrics or model

    trained = run_training(["squad", *common])
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]
    assert "features loaded from cache" in trained.stdout and "features tokenized" not in trained.stdout
    assert (out / "metrics.json").exists()
