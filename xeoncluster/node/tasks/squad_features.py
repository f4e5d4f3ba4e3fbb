"""SQuAD preprocessing (windows over long contexts) and postprocessing (logits -> answer text).

Follows Hugging Face's reference `run_qa.py` / `utils_qa.py` recipe.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class WindowConfig:
    max_seq_length: int = 384
    doc_stride: int = 128


@dataclass(frozen=True)
class PostprocessConfig:
    n_best_size: int = 20
    max_answer_length: int = 30
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0


def _tokenize_windows(examples: Mapping[str, list[Any]], tokenizer: Any, cfg: WindowConfig) -> Any:
    pad_on_right = tokenizer.padding_side == "right"
    questions = [q.lstrip() for q in examples["question"]]
    contexts = examples["context"]
    return tokenizer(
        questions if pad_on_right else contexts,
        contexts if pad_on_right else questions,
        truncation="only_second" if pad_on_right else "only_first",
        max_length=cfg.max_seq_length,
        stride=cfg.doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )


def _context_index(tokenizer: Any) -> int:
    return 1 if tokenizer.padding_side == "right" else 0


def _answer_positions(
    offsets: Sequence[tuple[int, int]],
    sequence_ids: Sequence[int | None],
    answers: Mapping[str, list[Any]],
    cls_index: int,
    context_id: int,
) -> tuple[int, int]:
    """Token start/end of the first gold answer, or the CLS token when it is not in this window."""
    if len(answers["answer_start"]) == 0:
        return cls_index, cls_index
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    token_start = 0
    while sequence_ids[token_start] != context_id:
        token_start += 1
    token_end = len(sequence_ids) - 1
    while sequence_ids[token_end] != context_id:
        token_end -= 1
    if not (offsets[token_start][0] <= start_char and offsets[token_end][1] >= end_char):
        return cls_index, cls_index
    while token_start < len(offsets) and offsets[token_start][0] <= start_char:
        token_start += 1
    while offsets[token_end][1] >= end_char:
        token_end -= 1
    return token_start - 1, token_end + 1


def prepare_train_features(
    examples: Mapping[str, list[Any]], tokenizer: Any, cfg: WindowConfig
) -> dict[str, list[Any]]:
    tokenized = _tokenize_windows(examples, tokenizer, cfg)
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    offset_mapping = tokenized.pop("offset_mapping")
    _label_windows(tokenized, offset_mapping, examples, sample_mapping, tokenizer, _context_index(tokenizer))
    return dict(tokenized)


def prepare_eval_features(
    examples: Mapping[str, list[Any]], tokenizer: Any, cfg: WindowConfig
) -> dict[str, list[Any]]:
    tokenized = _tokenize_windows(examples, tokenizer, cfg)
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    context_id = _context_index(tokenizer)
    example_ids, offset_mapping = [], []
    for i, offsets in enumerate(tokenized["offset_mapping"]):
        sequence_ids = tokenized.sequence_ids(i)
        example_ids.append(examples["id"][sample_mapping[i]])
        # Non-context tokens get no offsets so postprocessing can never pick them.
        offset_mapping.append([o if sequence_ids[k] == context_id else None for k, o in enumerate(offsets)])
    tokenized["example_id"] = example_ids
    tokenized["offset_mapping"] = offset_mapping
    if "answers" in examples:
        _add_eval_positions(tokenized, examples, sample_mapping, tokenizer, context_id)
    return dict(tokenized)


def _add_eval_positions(
    tokenized: Any, examples: Mapping[str, list[Any]], sample_mapping: list[int], tokenizer: Any, context_id: int
) -> None:
    """Labels for the first gold answer, so evaluation also reports a loss (offsets are already masked)."""
    offsets = [[o if o is not None else (0, 0) for o in window] for window in tokenized["offset_mapping"]]
    _label_windows(tokenized, offsets, examples, sample_mapping, tokenizer, context_id)


def _label_windows(tokenized: Any, offset_mapping: list[Any], examples: Mapping[str, list[Any]],
                   sample_mapping: list[int], tokenizer: Any, context_id: int) -> None:
    """start/end token positions of each window's sample's answer (the CLS token when it is not inside)."""
    starts, ends = [], []
    for i, offsets in enumerate(offset_mapping):
        input_ids = tokenized["input_ids"][i]
        cls_index = input_ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in input_ids else 0
        answers = examples["answers"][sample_mapping[i]]
        start, end = _answer_positions(offsets, tokenized.sequence_ids(i), answers, cls_index, context_id)
        starts.append(start)
        ends.append(end)
    tokenized["start_positions"] = starts
    tokenized["end_positions"] = ends


def _window_candidates(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    offsets: Sequence[Any],
    context: str,
    cfg: PostprocessConfig,
) -> list[dict[str, Any]]:
    candidates = []
    start_indexes = np.argsort(start_logits)[-1 : -cfg.n_best_size - 1 : -1].tolist()
    end_indexes = np.argsort(end_logits)[-1 : -cfg.n_best_size - 1 : -1].tolist()
    for s in start_indexes:
        for e in end_indexes:
            if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                continue
            if len(offsets[s]) < 2 or len(offsets[e]) < 2:
                continue
            if e < s or e - s + 1 > cfg.max_answer_length:
                continue
            start_char, end_char = offsets[s][0], offsets[e][1]
            candidates.append(
                {
                    "text": context[start_char:end_char],
                    "score": float(start_logits[s] + end_logits[e]),
                }
            )
    return candidates


# Null odds when no span survives at all: the null answer wins outright, past any threshold.
NO_SPAN_ODDS = 1e6


@dataclass(frozen=True)
class SquadPredictions:
    """Answer text per example id, and for v2 the null score minus the best span's score."""

    answers: dict[str, str]
    null_odds: dict[str, float] | None


def _best_answer(
    candidates: list[dict[str, Any]], null_score: float | None, cfg: PostprocessConfig
) -> tuple[str, float | None]:
    ranked = sorted(candidates, key=lambda c: c["score"], reverse=True)[: cfg.n_best_size]
    if not cfg.version_2_with_negative:
        return (ranked[0]["text"] if ranked else ""), None
    non_null = [c for c in ranked if c["text"]]
    if not non_null:
        return "", NO_SPAN_ODDS
    best = non_null[0]
    if null_score is None:
        return best["text"], -NO_SPAN_ODDS
    score_diff = null_score - best["score"]
    return ("" if score_diff > cfg.null_score_diff_threshold else best["text"]), score_diff


def postprocess(
    examples: Sequence[Mapping[str, Any]],
    features: Sequence[Mapping[str, Any]],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    cfg: PostprocessConfig,
) -> SquadPredictions:
    """Map each example id to its predicted answer text ('' is the null answer for v2) and its null odds."""
    features_per_example: dict[str, list[int]] = collections.defaultdict(list)
    for index, feature in enumerate(features):
        features_per_example[feature["example_id"]].append(index)
    answers: dict[str, str] = {}
    null_odds: dict[str, float] = {}
    for example in examples:
        candidates: list[dict[str, Any]] = []
        min_null_score: float | None = None
        for index in features_per_example.get(example["id"], []):
            starts, ends = start_logits[index], end_logits[index]
            # The null answer lives on the CLS token at position 0; keep the weakest window's score.
            null_score = float(starts[0] + ends[0])
            if min_null_score is None or null_score < min_null_score:
                min_null_score = null_score
            candidates += _window_candidates(
                starts, ends, features[index]["offset_mapping"], example["context"], cfg
            )
        answers[example["id"]], odds = _best_answer(candidates, min_null_score, cfg)
        if odds is not None:
            null_odds[example["id"]] = odds
    return SquadPredictions(answers, null_odds if cfg.version_2_with_negative else None)
