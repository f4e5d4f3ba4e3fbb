"""predictions.json / null_odds.json in the official scripts' layouts, and GLUE's per-example records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xeoncluster.node.events.loss_curve import curve_from_history
from xeoncluster.node.tasks.predictions import NULL_ODDS, PREDICTIONS, glue_records, squad_files, write_files
from xeoncluster.node.tasks.squad_features import NO_SPAN_ODDS, PostprocessConfig, postprocess
from xeoncluster.node.tasks.squad_metrics import squad_scores

from .squad_official import evaluate, official_layout
from .test_postprocess import EXAMPLE, FEATURE, _logits

V2 = PostprocessConfig(version_2_with_negative=True)


def test_null_odds_are_null_score_minus_best_span_and_decide_the_answer() -> None:
    start, end = _logits(4, 4, null=10.0)  # null 10, best span "Vexa" 4 + 3
    result = postprocess([EXAMPLE], [FEATURE], start, end, V2)
    assert result.answers == {"q1": ""} and result.null_odds == {"q1": pytest.approx(3.0)}
    start, end = _logits(4, 4, null=5.0)
    result = postprocess([EXAMPLE], [FEATURE], start, end, V2)
    assert result.answers == {"q1": "Vexa"} and result.null_odds == {"q1": pytest.approx(-2.0)}


def test_v1_has_no_null_odds_and_no_span_means_null_wins() -> None:
    start, end = _logits(4, 4)
    assert postprocess([EXAMPLE], [FEATURE], start, end, PostprocessConfig()).null_odds is None
    no_offsets = {"example_id": "q1", "offset_mapping": [None] * len(FEATURE["offset_mapping"])}
    result = postprocess([EXAMPLE], [no_offsets], start, end, V2)
    assert result.answers == {"q1": ""} and result.null_odds == {"q1": NO_SPAN_ODDS}


def test_squad_files_are_written_as_the_official_scripts_read_them(tmp_path: Path) -> None:
    files = squad_files({"q1": "Vexa", "q2": ""}, {"q1": -2.5, "q2": np.float32(3.0)})
    written = write_files(tmp_path, files)
    assert sorted(p.name for p in written) == [NULL_ODDS, PREDICTIONS]
    assert json.loads((tmp_path / PREDICTIONS).read_text()) == {"q1": "Vexa", "q2": ""}
    assert json.loads((tmp_path / NULL_ODDS).read_text()) == {"q1": -2.5, "q2": 3.0}
    assert not list(tmp_path.glob("*.tmp"))
    assert set(squad_files({"q1": "x"}, None)) == {PREDICTIONS}


RECORDS = [
    {"id": "a", "title": "T", "context": "Vexa is the capital.", "question": "Capital?",
     "answers": {"text": ["Vexa", "the Vexa"], "answer_start": [0, 0]}},
    {"id": "b", "title": "T", "context": "Vexa is the capital.", "question": "Mayor?",
     "answers": {"text": [], "answer_start": []}},
    {"id": "c", "title": "U", "context": "Port lies north.", "question": "Where?",
     "answers": {"text": ["north"], "answer_start": [10]}},
]


@pytest.mark.parametrize("answers", [
    {"a": "the Vexa!", "b": "", "c": "north"},
    {"a": "Vexa capital", "b": "Vexa", "c": ""},
    {"a": "", "b": "", "c": "lies north"},
])
def test_official_v2_logic_agrees_with_the_training_metrics(answers: dict[str, str]) -> None:
    null_odds = {qid: (1.0 if text == "" else -1.0) for qid, text in answers.items()}
    official = evaluate(official_layout(RECORDS), answers, null_odds)
    ours = squad_scores(answers, {r["id"]: r["answers"]["text"] for r in RECORDS})
    assert official["exact"] == pytest.approx(ours["exact_match"])
    assert official["f1"] == pytest.approx(ours["f1"])


def test_official_na_threshold_overrides_a_span_with_high_null_odds() -> None:
    official = evaluate(official_layout(RECORDS), {"a": "Vexa", "b": "Vexa", "c": "north"},
                        {"a": 0.0, "b": 1.5, "c": 0.0})
    assert official["exact"] == pytest.approx(100.0)


def test_glue_records_hold_index_sentences_prediction_and_gold() -> None:
    texts = [{"sentence1": "A cat.", "sentence2": "A feline."}, {"sentence1": "Rain.", "sentence2": "Sun."}]
    assert glue_records(texts, [1, 1], [1, 0]) == [
        {"index": 0, "sentence1": "A cat.", "sentence2": "A feline.", "predicted": 1, "gold": 1},
        {"index": 1, "sentence1": "Rain.", "sentence2": "Sun.", "predicted": 1, "gold": 0},
    ]
    with pytest.raises(ValueError):
        glue_records(texts, [1], [1, 0])


def test_loss_curve_adds_the_untrained_and_final_eval_losses() -> None:
    train = [{"step": 10, "loss": 2.0}, {"step": 20, "loss": 1.5}]
    curve = curve_from_history(train, [{"step": 10, "eval_loss": 1.9}], before=3.0, after=1.4, final_step=20)
    assert curve.train == [(10.0, 2.0), (20.0, 1.5)]
    assert curve.eval == [(0.0, 3.0), (10.0, 1.9), (20.0, 1.4)]
    assert curve_from_history([], [], None, None, 0).empty
