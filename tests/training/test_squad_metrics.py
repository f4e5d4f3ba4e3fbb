import pytest

from xeoncluster.node.tasks.squad_metrics import exact_score, f1_score, gold_answers, normalize_answer, squad_scores


def test_normalization_lowercases_and_drops_punctuation_articles_and_spaces() -> None:
    assert normalize_answer("  The  Eiffel-Tower, in Paris!  ") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words


def test_exact_match_after_normalization() -> None:
    assert exact_score("The Beatles", "beatles.") == 1
    assert exact_score("Beatles", "The Rolling Stones") == 0


def test_partial_overlap_f1() -> None:
    # gold: [new, york, city], pred: [york, city, hall] -> 2 common; P=2/3, R=2/3, F1=2/3
    assert f1_score("New York City", "york city hall") == pytest.approx(2 / 3)
    # gold: [1, 2], pred: [2] -> P=1, R=1/2 -> F1=2/3
    assert f1_score("1 2", "2") == pytest.approx(2 / 3)
    assert f1_score("cat", "dog") == 0.0


def test_repeated_tokens_count_with_multiplicity() -> None:
    # gold [a1, a1, b], pred [a1] -> common 1; P=1, R=1/3 -> F1=0.5
    assert f1_score("a1 a1 b", "a1") == pytest.approx(0.5)


def test_max_over_several_golds() -> None:
    scores = squad_scores({"q": "Denver Broncos"}, {"q": ["Broncos", "Denver Broncos", "The Denver Broncos"]})
    assert scores == {"exact_match": 100.0, "f1": 100.0}
    scores = squad_scores({"q": "the Broncos team"}, {"q": ["Denver Broncos", "Broncos"]})
    # vs "Broncos": P=1/2, R=1 -> 2/3; vs "Denver Broncos": P=1/2, R=1/2 -> 1/2; max 2/3
    assert scores["exact_match"] == 0.0
    assert scores["f1"] == pytest.approx(100 * 2 / 3)


def test_no_answer_questions_v2() -> None:
    assert gold_answers([]) == [""]
    assert gold_answers(["", "a"]) == [""]  # "a" normalizes to nothing
    refs = {"unanswerable": [], "answerable": ["Paris"]}
    assert squad_scores({"unanswerable": "", "answerable": ""}, refs) == {"exact_match": 50.0, "f1": 50.0}
    assert squad_scores({"unanswerable": "Paris", "answerable": "Paris"}, refs) == {"exact_match": 50.0, "f1": 50.0}
    assert squad_scores({"unanswerable": "", "answerable": "Paris"}, refs) == {"exact_match": 100.0, "f1": 100.0}


def test_missing_prediction_counts_as_empty_and_averages_are_percent() -> None:
    refs = {"a": ["x y"], "b": ["z"], "c": ["w"], "d": ["v"]}
    scores = squad_scores({"a": "x", "b": "z"}, refs)
    assert scores["exact_match"] == pytest.approx(25.0)
    assert scores["f1"] == pytest.approx(100 * (2 / 3 + 1) / 4)
