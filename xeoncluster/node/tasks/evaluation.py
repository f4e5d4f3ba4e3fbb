"""What evaluating a task gives back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Evaluation:
    """Scores on the validation split, its loss, and the files rank 0 writes next to metrics.json."""

    scores: dict[str, float]
    loss: float | None = None
    files: dict[str, Any] = field(default_factory=dict)  # file name -> JSON payload
