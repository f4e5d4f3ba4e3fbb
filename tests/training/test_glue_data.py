from pathlib import Path

import pytest

from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.tasks.glue_data import get_task, load_glue, read_glue_file
from xeoncluster.node.tasks.glue_metrics import glue_scores
from xeoncluster.node.tasks.sources import DataSource

from .training_helpers import SHARED_DATA

MRPC = SHARED_DATA / "mrpc-train.tsv"


def test_original_mrpc_tsv_keeps_quote_characters() -> None:
    rows = read_glue_file(MRPC, get_task("mrpc"))
    assert len(rows) == 6
    assert [r["label"] for r in rows[:2]] == [1, 0]
    assert rows[0]["sentence1"].startswith("He said the foodservice pie business")
    # A leading '"' is text in MRPC, not CSV quoting.
    assert rows[0]["sentence2"] == '" The foodservice pie business does not fit our long-term growth strategy .'
    assert rows[1]["sentence2"].count('"') == 2


def test_mrpc_loads_as_dataset_dict() -> None:
    data = load_glue(DataSource(train_file=MRPC, eval_file=MRPC), get_task("mrpc"))
    assert set(data) == {"train", "validation"}
    assert data["train"].column_names == ["sentence1", "sentence2", "label"]


def test_csv_and_json_files(tmp_path: Path) -> None:
    csv_file = tmp_path / "rte.csv"
    csv_file.write_text('sentence1,sentence2,label\n"A, b",c,not_entailment\nd,e,entailment\n')
    assert read_glue_file(csv_file, get_task("rte")) == [
        {"sentence1": "A, b", "sentence2": "c", "label": 1},
        {"sentence1": "d", "sentence2": "e", "label": 0},
    ]
    json_file = tmp_path / "sst2.jsonl"
    json_file.write_text('{"sentence": "good", "label": 1}\n{"sentence": "bad", "label": 0}\n')
    assert [r["label"] for r in read_glue_file(json_file, get_task("sst2"))] == [1, 0]


def test_unknown_task_and_missing_columns_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="unknown GLUE task"):
        get_task("stsb")
    bad = tmp_path / "bad.tsv"
    bad.write_text("foo\tbar\n1\t2\n")
    with pytest.raises(TrainingError, match="row 2"):
        read_glue_file(bad, get_task("mrpc"))


def test_glue_metrics() -> None:
    # labels 1,1,0,0 preds 1,0,0,1: acc 50; tp=1 fp=1 fn=1 -> F1 = 2/4
    assert glue_scores([1, 1, 0, 0], [1, 0, 0, 1], 2) == {"accuracy": 50.0, "f1": 50.0}
    assert glue_scores([0, 0], [0, 0], 2) == {"accuracy": 100.0, "f1": 0.0}
