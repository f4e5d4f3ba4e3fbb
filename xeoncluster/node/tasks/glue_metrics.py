"""Accuracy and F1 for GLUE classification tasks."""

from __future__ import annotations

from collections.abc import Sequence


def accuracy(labels: Sequence[int], predictions: Sequence[int]) -> float:
    if not labels:
        return 0.0
    return sum(int(label == p) for label, p in zip(labels, predictions, strict=True)) / len(labels)


def _f1_for(labels: Sequence[int], predictions: Sequence[int], positive: int) -> float:
    tp = sum(1 for label, p in zip(labels, predictions, strict=True) if label == positive and p == positive)
    fp = sum(1 for label, p in zip(labels, predictions, strict=True) if label != positive and p == positive)
    fn = sum(1 for label, p in zip(labels, predictions, strict=True) if label == positive and p != positive)
    if tp == 0:
        return 0.0
    return 2 * tp / (2 * tp + fp + fn)


def f1(labels: Sequence[int], predictions: Sequence[int], num_labels: int = 2) -> float:
    """Binary F1 of class 1 (as GLUE reports for MRPC/QQP); macro F1 for more classes."""
    if num_labels <= 2:
        return _f1_for(labels, predictions, positive=1)
    return sum(_f1_for(labels, predictions, c) for c in range(num_labels)) / num_labels


def glue_scores(labels: Sequence[int], predictions: Sequence[int], num_labels: int) -> dict[str, float]:
    return {
        "accuracy": 100.0 * accuracy(labels, predictions),
        "f1": 100.0 * f1(labels, predictions, num_labels),
    }
