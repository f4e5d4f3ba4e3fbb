"""Load SQuAD-style data: hub datasets, flat HF JSON/JSONL, or the official nested JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.tasks.sources import DataSource, check_local_files, load_from_hub

COLUMNS = ("id", "title", "context", "question", "answers")


def squad_features_schema() -> Any:
    import datasets

    # datasets 4+ has List; the intel stack pins datasets 3.6, which only has Sequence.
    list_of = getattr(datasets, "List", None) or datasets.Sequence
    return datasets.Features(
        {
            "id": datasets.Value("string"),
            "title": datasets.Value("string"),
            "context": datasets.Value("string"),
            "question": datasets.Value("string"),
            "answers": {
                "text": list_of(datasets.Value("string")),
                "answer_start": list_of(datasets.Value("int32")),
            },
        }
    )


def _flat_record(raw: dict[str, Any]) -> dict[str, Any]:
    answers = raw.get("answers") or {"text": [], "answer_start": []}
    return {
        "id": str(raw["id"]),
        "title": str(raw.get("title", "")),
        "context": raw["context"],
        "question": raw["question"],
        "answers": {
            "text": list(answers.get("text", [])),
            "answer_start": [int(s) for s in answers.get("answer_start", [])],
        },
    }


def _nested_records(articles: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for article in articles:
        title = str(article.get("title", ""))
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                yield {
                    "id": str(qa["id"]),
                    "title": title,
                    "context": paragraph["context"],
                    "question": qa["question"],
                    "answers": {
                        "text": [a["text"] for a in answers],
                        "answer_start": [int(a["answer_start"]) for a in answers],
                    },
                }


def is_nested_layout(items: list[Any]) -> bool:
    return bool(items) and isinstance(items[0], dict) and "paragraphs" in items[0]


def records_from_json(payload: Any) -> list[dict[str, Any]]:
    """Detect the layout: {"data": [articles with paragraphs]} (official) or flat records."""
    items = payload.get("data", []) if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        raise ValueError("expected a list of records or {'data': [...]}")
    if is_nested_layout(items):
        return list(_nested_records(items))
    return [_flat_record(item) for item in items]


def read_squad_file(path: Path) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
        if Path(path).suffix == ".jsonl":
            return records_from_json([json.loads(line) for line in text.splitlines() if line.strip()])
        return records_from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise TrainingError(f"cannot read SQuAD data from '{path}': {exc}") from exc


def _local_split(path: Path | None) -> Any:
    import datasets

    if path is None:
        return None
    return datasets.Dataset.from_list(read_squad_file(path), features=squad_features_schema())


def load_squad(source: DataSource) -> Any:
    """A DatasetDict with `train` and, when available, `validation`."""
    import datasets

    if source.is_local:
        check_local_files(source)
        splits = {"train": _local_split(source.train_file), "validation": _local_split(source.eval_file)}
        return datasets.DatasetDict({k: v for k, v in splits.items() if v is not None})
    name = source.dataset or "rajpurkar/squad"
    loaded = load_from_hub(
        "dataset", name, lambda: datasets.load_dataset(name, source.dataset_config)
    )
    return datasets.DatasetDict(
        {k: loaded[k].select_columns([c for c in COLUMNS if c in loaded[k].column_names]) for k in loaded}
    )


def has_negatives(dataset: Any) -> bool:
    return any(len(a["text"]) == 0 for a in dataset["answers"])
