"""Capping a dataset split to a maximum number of samples."""

from __future__ import annotations

from typing import Any


def cap(dataset: Any, limit: int | None) -> Any:
    if limit is None or limit >= len(dataset):
        return dataset
    return dataset.select(range(limit))
