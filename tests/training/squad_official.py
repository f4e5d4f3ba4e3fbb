"""The official SQuAD v2.0 evaluation logic (evaluate-v2.0.py), kept independent of xeoncluster/node/.

It reads what the official script reads: the dataset in the official nested layout, a predictions
file (id -> text) and optionally an na-prob file (id -> no-answer odds), thresholded at 1.0.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any


def normalize_answer(s: str) -> str:
    def remove_articles(text: str) -> str:
        return re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", text)

    def white_space_fix(text: str) -> str:
        return " ".join(text.split())

    def remove_punc(text: str) -> str:
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def get_tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def compute_exact(a_gold: str, a_pred: str) -> int:
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    gold_toks, pred_toks = get_tokens(a_gold), get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def _questions(dataset: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [qa for article in dataset for p in article["paragraphs"] for qa in p["qas"]]


def get_raw_scores(dataset: Sequence[Mapping[str, Any]], preds: Mapping[str, str]) -> tuple[dict, dict]:
    exact_scores, f1_scores = {}, {}
    for qa in _questions(dataset):
        qid = qa["id"]
        gold_answers = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        if qid not in preds:
            continue
        a_pred = preds[qid]
        exact_scores[qid] = max(compute_exact(a, a_pred) for a in gold_answers)
        f1_scores[qid] = max(compute_f1(a, a_pred) for a in gold_answers)
    return exact_scores, f1_scores


def apply_no_ans_threshold(scores: dict, na_probs: Mapping[str, float], qid_to_has_ans: Mapping[str, bool],
                           na_prob_thresh: float) -> dict:
    return {qid: float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else s
            for qid, s in scores.items()}


def evaluate(dataset: Sequence[Mapping[str, Any]], preds: Mapping[str, str],
             na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0) -> dict[str, float]:
    """`dataset` is the official file's `data` list; returns exact/f1 in percent, as the script prints."""
    na_probs = na_probs if na_probs is not None else dict.fromkeys(preds, 0.0)
    qid_to_has_ans = {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}
    exact_raw, f1_raw = get_raw_scores(dataset, preds)
    exact = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1 = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    total = len(exact)
    return {"exact": 100.0 * sum(exact.values()) / total, "f1": 100.0 * sum(f1.values()) / total, "total": total}


def official_layout(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Flat Hugging Face records (answers: {text, answer_start}) -> the official nested `data` list."""
    by_context: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        answers = [{"text": t, "answer_start": s}
                   for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"], strict=True)]
        qa = {"id": r["id"], "question": r["question"], "answers": answers, "is_impossible": not answers}
        by_context[(r.get("title", ""), r["context"])].append(qa)
    articles: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for (title, context), qas in by_context.items():
        articles[title].append({"context": context, "qas": qas})
    return [{"title": title, "paragraphs": paragraphs} for title, paragraphs in articles.items()]
