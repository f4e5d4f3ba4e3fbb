"""Find the checkpoint to resume from."""

from __future__ import annotations

import json
import re
from pathlib import Path

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_STATE = "trainer_state.json"


def last_complete_checkpoint(output_dir: Path) -> Path | None:
    """The highest checkpoint-N that holds trainer_state.json (the Trainer writes it last, so a
    checkpoint cut short by a kill is skipped)."""
    if not output_dir.is_dir():
        return None
    candidates = [
        (int(match.group(1)), path)
        for path in output_dir.iterdir()
        if (match := _CHECKPOINT.match(path.name)) and (path / _STATE).is_file()
    ]
    return max(candidates)[1] if candidates else None


def checkpoint_step(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / _STATE).read_text())["global_step"])
