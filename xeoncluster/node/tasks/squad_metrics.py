"""Exact match and F1 exactly as the official SQuAD v1.1 / v2.0 evaluation scripts."""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and articles, collapse whitespace (official order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _tokens(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def exact_score(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_score(gold: str, prediction: str) -> float:
    gold_tokens, pred_tokens = _tokens(gold), _tokens(prediction)
    if not gold_tokens or not pred_tokens:
        # v2.0 rule: an empty answer scores 1 only against an empty answer.
        return float(gold_tokens == pred_tokens)
    common = collections.Counter(gold_tokens) & collections.Counter(pred_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_answers(texts: Iterable[str]) -> list[str]:
    """Golds that survive normalization; none at all means the question has no answer ([''])."""
    golds = [t for t in texts if normalize_answer(t)]
    return golds or [""]


def squad_scores(
    predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """Mean EM/F1 in percent over `references` (id -> gold texts), max over golds per question."""
    if not references:
        return {"exact_match": 0.0, "f1": 0.0}
    exact_total = f1_total = 0.0
    for qid, texts in references.items():
        golds = gold_answers(texts)
        prediction = predictions.get(qid, "")
        exact_total += max(exact_score(g, prediction) for g in golds)
        f1_total += max(f1_score(g, prediction) for g in golds)
    count = len(references)
    return {"exact_match": 100.0 * exact_total / count, "f1": 100.0 * f1_total / count}
