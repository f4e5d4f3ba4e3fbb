"""GLUE classification tasks: the task table and loading hub datasets or local TSV/CSV/JSON."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.tasks.sources import DataSource, check_local_files, load_from_hub


@dataclass(frozen=True)
class GlueTask:
    name: str
    text_columns: tuple[str, ...]
    num_labels: int
    label_names: tuple[str, ...] = ()


TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask("mrpc", ("sentence1", "sentence2"), 2),
        GlueTask("sst2", ("sentence",), 2),
        GlueTask("cola", ("sentence",), 2),
        GlueTask("qnli", ("question", "sentence"), 2, ("entailment", "not_entailment")),
        GlueTask("rte", ("sentence1", "sentence2"), 2, ("entailment", "not_entailment")),
        GlueTask("wnli", ("sentence1", "sentence2"), 2),
        GlueTask("qqp", ("question1", "question2"), 2),
        GlueTask(
            "mnli", ("premise", "hypothesis"), 3, ("entailment", "neutral", "contradiction")
        ),
    )
}

# Column names of the original GLUE TSV files -> the Hugging Face names.
_COLUMN_ALIASES = {
    "Quality": "label",
    "#1 String": "sentence1",
    "#2 String": "sentence2",
    "is_duplicate": "label",
    "gold_label": "label",
}


def get_task(name: str) -> GlueTask:
    try:
        return TASKS[name.lower().replace("-", "")]
    except KeyError:
        raise TrainingError(
            f"unknown GLUE task {name!r}; choose one of {', '.join(sorted(TASKS))}"
        ) from None


def _label_id(value: Any, task: GlueTask) -> int:
    text = str(value).strip()
    if task.label_names and text in task.label_names:
        return task.label_names.index(text)
    return int(float(text))


def _read_delimited(path: Path, delimiter: str) -> list[dict[str, str]]:
    # QUOTE_NONE: MRPC sentences contain bare '"' characters that are text, not CSV quoting.
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(
            handle,
            delimiter=delimiter,
            quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL,
        )
        return list(reader)


def _read_json(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl" or not text.lstrip().startswith(("[", "{\"data\"")):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    payload = json.loads(text)
    return payload["data"] if isinstance(payload, dict) else payload


def read_glue_file(path: Path, task: GlueTask) -> list[dict[str, Any]]:
    """Rows with the task's text columns and an integer `label`."""
    suffix = Path(path).suffix.lower()
    if suffix in {".json", ".jsonl"}:
        raw = _read_json(Path(path))
    else:
        raw = _read_delimited(Path(path), "\t" if suffix in {".tsv", ".txt"} else ",")
    rows = []
    for number, row in enumerate(raw, start=2):
        renamed = {_COLUMN_ALIASES.get(k, k): v for k, v in row.items() if k is not None}
        try:
            texts = {c: str(renamed[c]) for c in task.text_columns}
            rows.append({**texts, "label": _label_id(renamed["label"], task)})
        except (KeyError, ValueError) as exc:
            raise TrainingError(f"cannot read {task.name} row {number} of '{path}': {exc!r}") from exc
    return rows


def _local_split(path: Path | None, task: GlueTask) -> Any:
    import datasets

    if path is None:
        return None
    return datasets.Dataset.from_list(read_glue_file(path, task))


def load_glue(source: DataSource, task: GlueTask) -> Any:
    """A DatasetDict with `train` and, when available, `validation`."""
    import datasets

    if source.is_local:
        check_local_files(source)
        splits = {
            "train": _local_split(source.train_file, task),
            "validation": _local_split(source.eval_file, task),
        }
        return datasets.DatasetDict({k: v for k, v in splits.items() if v is not None})
    name = source.dataset or "nyu-mll/glue"
    config = source.dataset_config or task.name
    loaded = load_from_hub("dataset", name, lambda: datasets.load_dataset(name, config))
    if "validation" not in loaded and "validation_matched" in loaded:
        loaded["validation"] = loaded["validation_matched"]
    columns = [*task.text_columns, "label"]
    return datasets.DatasetDict(
        {k: loaded[k].select_columns(columns) for k in ("train", "validation") if k in loaded}
    )
