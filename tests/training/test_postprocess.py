import numpy as np

from xeoncluster.node.tasks.squad_features import PostprocessConfig, postprocess

CONTEXT = "Vexa is the capital of Norland ."
# Tokens: [CLS] what ? [SEP] vexa is the capital of norland . [SEP]
OFFSETS = [None, None, None, None, (0, 4), (5, 7), (8, 11), (12, 19), (20, 22), (23, 30), (31, 32), None]
EXAMPLE = {"id": "q1", "context": CONTEXT}
FEATURE = {"example_id": "q1", "offset_mapping": OFFSETS}


def _logits(best_start: int, best_end: int, null: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    start = np.full(len(OFFSETS), -5.0)
    end = np.full(len(OFFSETS), -5.0)
    start[best_start], end[best_end] = 4.0, 3.0
    start[0] = end[0] = null / 2
    # Question tokens score high but must never be chosen (no offsets there).
    start[1], end[1] = 9.0, 9.0
    return start[None, :], end[None, :]


def test_span_is_mapped_back_to_context_text() -> None:
    start, end = _logits(8, 9)  # "of Norland"
    predictions = postprocess([EXAMPLE], [FEATURE], start, end, PostprocessConfig()).answers
    assert predictions == {"q1": "of Norland"}


def test_end_before_start_and_too_long_spans_are_skipped() -> None:
    start, end = _logits(9, 4)  # the best end precedes the best start
    end[0, 9] = 1.0
    predictions = postprocess([EXAMPLE], [FEATURE], start, end, PostprocessConfig()).answers
    assert predictions["q1"] == "Norland"  # start 9 + end 9 = 5 beats every other valid pair
    start, end = _logits(4, 9)  # "Vexa ... Norland" is 6 tokens
    start[0, 8] = 2.0
    predictions = postprocess([EXAMPLE], [FEATURE], start, end, PostprocessConfig(max_answer_length=2)).answers
    assert predictions["q1"] == "of Norland"  # 2 + 3 = 5 is the best span of at most 2 tokens


def test_null_answer_wins_when_its_score_beats_the_best_span_v2() -> None:
    start, end = _logits(4, 4, null=10.0)  # null 10 > span 4 + 3
    v2 = PostprocessConfig(version_2_with_negative=True)
    assert postprocess([EXAMPLE], [FEATURE], start, end, v2).answers == {"q1": ""}
    start, end = _logits(4, 4, null=5.0)  # null 5 < span 7
    assert postprocess([EXAMPLE], [FEATURE], start, end, v2).answers == {"q1": "Vexa"}


def test_v1_never_predicts_null() -> None:
    start, end = _logits(4, 4, null=10.0)
    assert postprocess([EXAMPLE], [FEATURE], start, end, PostprocessConfig()).answers == {"q1": "Vexa"}


def test_windows_of_one_example_are_combined_and_min_null_score_used() -> None:
    weak_start, weak_end = _logits(4, 4, null=20.0)
    strong_start, strong_end = _logits(9, 9, null=-20.0)
    strong_start[0, 9] = 8.0
    start = np.concatenate([weak_start, strong_start])
    end = np.concatenate([weak_end, strong_end])
    v2 = PostprocessConfig(version_2_with_negative=True)
    # The null score is the minimum over windows (-20), so the best span (window 2) wins.
    assert postprocess([EXAMPLE], [FEATURE, FEATURE], start, end, v2).answers == {"q1": "Norland"}
