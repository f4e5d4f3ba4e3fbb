"""The prediction files a run leaves next to metrics.json, in the layouts their readers expect."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PREDICTIONS = "predictions.json"
NULL_ODDS = "null_odds.json"


def squad_files(answers: Mapping[str, str], null_odds: Mapping[str, float] | None) -> dict[str, Any]:
    """`predictions.json` as the official v1.1/v2.0 scripts read it (id -> answer text, '' = no answer),
    and for v2 `null_odds.json` as the v2 script's --na-prob-file reads it (id -> null minus best span score)."""
    files: dict[str, Any] = {PREDICTIONS: dict(answers)}
    if null_odds is not None:
        files[NULL_ODDS] = {qid: float(odds) for qid, odds in null_odds.items()}
    return files


def glue_records(
    texts: Sequence[Mapping[str, Any]], predicted: Sequence[int], gold: Sequence[int]
) -> list[dict[str, Any]]:
    """One record per evaluation example, in dataset order: its index, sentence(s), predicted and gold label."""
    return [
        {"index": index, **dict(row), "predicted": int(p), "gold": int(g)}
        for index, (row, p, g) in enumerate(zip(texts, predicted, gold, strict=True))
    ]


def write_json(path: Path, payload: Any) -> None:
    """Write atomically: a reader (or the fetch) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(path)


def write_files(output_dir: Path, files: Mapping[str, Any]) -> list[Path]:
    written = []
    for name, payload in files.items():
        write_json(output_dir / name, payload)
        written.append(output_dir / name)
    return written
