"""The demo assets are deterministic and offline, and a short demo run visibly learns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xeoncluster.node.tasks.demo_assets import DemoLayout, ensure_demo_assets

from .training_helpers import run_training


def test_assets_are_complete_and_idempotent(demo_dir: Path) -> None:
    layout = DemoLayout(demo_dir)
    assert all(p.is_file() for p in layout.files())
    stamp = layout.squad_train.stat().st_mtime_ns
    assert ensure_demo_assets(demo_dir, seed=0) is False
    assert layout.squad_train.stat().st_mtime_ns == stamp
    header = layout.mrpc_train.read_text().splitlines()[0]
    assert header == "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"


def test_demo_tokenizer_is_fast_with_cls_sep_and_offsets(demo_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(DemoLayout(demo_dir).model)
    context = "The capital is Port ."
    encoded = tokenizer("What is the capital ?", context, return_offsets_mapping=True)
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokenizer.is_fast
    assert tokens == [
        "[CLS]", "what", "is", "the", "capital", "?", "[SEP]", "the", "capital", "is", "port", ".", "[SEP]"
    ]
    start, end = encoded["offset_mapping"][10]
    assert context[start:end] == "Port"


def test_same_seed_gives_identical_assets(demo_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "again"
    ensure_demo_assets(other, seed=0)
    for a, b in zip(DemoLayout(demo_dir).files(), DemoLayout(other).files(), strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    weights = Path("model") / "model.safetensors"
    assert (demo_dir / weights).read_bytes() == (other / weights).read_bytes()


def test_short_squad_demo_run_learns(demo_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "squad"
    result = run_training(
        ["squad", "--demo", str(demo_dir), "--output-dir", str(out), "--cache-dir", str(tmp_path / "cache"),
         "--max-steps", "600", "--max-eval-samples", "200"],
        timeout=600,  # 2 cores shared with other test runs
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    before, after = metrics["eval_before"]["f1"], metrics["f1"]
    assert before < 15
    assert after > before + 20, (before, after)
    for key in ("exact_match", "train_loss", "train_samples_per_second", "seconds_per_epoch", "epochs",
                "global_steps", "world_size", "ranks_per_node", "threads_per_rank", "precision", "stack",
                "model", "torch_version", "transformers_version", "resumed_from_step"):
        assert key in metrics
    assert metrics["global_steps"] == 600 and metrics["world_size"] == 1 and metrics["resumed_from_step"] is None
    predictions = json.loads((out / "predictions.json").read_text())
    null_odds = json.loads((out / "null_odds.json").read_text())
    assert len(predictions) == 200 and set(null_odds) == set(predictions)
    assert all((odds > 0) == (predictions[qid] == "") for qid, odds in null_odds.items())
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Evaluated during training (eval_strategy), before it (step 0) and after it.
    assert [e["step"] for e in metrics["eval_loss_history"]] == [150, 300, 450, 600]
    assert metrics["eval_before"]["eval_loss"] > metrics["eval_loss"]


def test_short_glue_demo_run_writes_per_example_predictions(demo_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "glue"
    result = run_training(
        ["glue", "--demo", str(demo_dir), "--output-dir", str(out), "--cache-dir", str(tmp_path / "cache"),
         "--max-steps", "20", "--max-eval-samples", "40", "--no-eval-before"],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = json.loads((out / "predictions.json").read_text())
    assert [r["index"] for r in records] == list(range(40))
    assert set(records[0]) == {"index", "sentence1", "sentence2", "predicted", "gold"}
    metrics = json.loads((out / "metrics.json").read_text())
    accuracy = 100 * sum(r["predicted"] == r["gold"] for r in records) / len(records)
    assert accuracy == pytest.approx(metrics["accuracy"])
    assert (out / "loss.png").exists() and not (out / "null_odds.json").exists()
