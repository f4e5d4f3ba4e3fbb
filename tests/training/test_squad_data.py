import json
from pathlib import Path

from xeoncluster.node.tasks.sources import DataSource
from xeoncluster.node.tasks.squad_data import load_squad, read_squad_file

from .training_helpers import SHARED_DATA

SAMPLE = SHARED_DATA / "squad-v2-sample.json"


def _nested_from_flat(records: list[dict]) -> dict:
    """The official layout: data -> articles -> paragraphs -> qas, grouped by title and context."""
    articles: dict[str, dict[str, list[dict]]] = {}
    for r in records:
        paragraphs = articles.setdefault(r["title"], {})
        qas = paragraphs.setdefault(r["context"], [])
        answers = [{"text": t, "answer_start": s}
                   for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"], strict=True)]
        qas.append(
            {
                "id": r["id"],
                "question": r["question"],
                "answers": answers,
                "is_impossible": not answers,
                **({"plausible_answers": [{"text": "x", "answer_start": 0}]} if not answers else {}),
            }
        )
    return {
        "version": "v2.0",
        "data": [
            {"title": title, "paragraphs": [{"context": c, "qas": qas} for c, qas in paragraphs.items()]}
            for title, paragraphs in articles.items()
        ],
    }


def _by_id(records: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in records}


def test_flat_sample_loads_with_no_answer_questions() -> None:
    records = read_squad_file(SAMPLE)
    assert len(records) == 14
    assert sum(1 for r in records if not r["answers"]["text"]) == 6
    first = records[0]
    start = first["answers"]["answer_start"][0]
    assert first["context"][start : start + len(first["answers"]["text"][0])] == first["answers"]["text"][0]


def test_nested_and_flat_layouts_give_the_same_records(tmp_path: Path) -> None:
    flat = read_squad_file(SAMPLE)
    nested_file = tmp_path / "nested.json"
    nested_file.write_text(json.dumps(_nested_from_flat(flat)))
    assert _by_id(read_squad_file(nested_file)) == _by_id(flat)


def test_both_layouts_and_jsonl_load_as_equal_datasets(tmp_path: Path) -> None:
    flat = read_squad_file(SAMPLE)
    nested_file = tmp_path / "nested.json"
    nested_file.write_text(json.dumps(_nested_from_flat(flat)))
    jsonl_file = tmp_path / "flat.jsonl"
    jsonl_file.write_text("".join(json.dumps(r) + "\n" for r in flat))
    loaded = [
        load_squad(DataSource(train_file=path, eval_file=SAMPLE))
        for path in (SAMPLE, nested_file, jsonl_file)
    ]
    rows = [_by_id(d["train"].to_list()) for d in loaded]
    assert rows[0] == rows[1] == rows[2]
    assert all(len(d["validation"]) == 14 for d in loaded)
