"""Find the checkpoint to resume from."""

from __future__ import annotations

import json
import re
from pathlib import Path

_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
_STATE = "trainer_state.json"
_WEIGHTS = "model.safetensors"


def last_complete_checkpoint(output_dir: Path) -> Path | None:
    """The highest checkpoint-N that holds both trainer_state.json and the weights. Rank 0's
    Trainer writes the state last; other nodes write the weights last (node_checkpoint.py), so
    either way a checkpoint cut short by a kill is skipped."""
    if not output_dir.is_dir():
        return None
    candidates = [
        (int(match.group(1)), path)
        for path in output_dir.iterdir()
        if (match := _CHECKPOINT.fullmatch(path.name)) and (path / _STATE).is_file() and (path / _WEIGHTS).is_file()
    ]
    return max(candidates)[1] if candidates else None


def checkpoint_step(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / _STATE).read_text())["global_step"])


def agreed_checkpoint(output_dir: Path) -> Path | None:
    """The newest checkpoint that every rank holds complete.

    Each node saves its own copy; a node killed mid-save may be a checkpoint behind the others,
    and ranks resuming from different steps would deadlock DDP. The MIN over ranks of each
    rank's newest complete step is a step all of them have (save_total_limit keeps two).
    """
    local = last_complete_checkpoint(output_dir)
    step = checkpoint_step(local) if local else -1
    step = _min_over_ranks(step)
    if step < 0:
        return None
    chosen = output_dir / f"checkpoint-{step}"
    if not ((chosen / _STATE).is_file() and (chosen / _WEIGHTS).is_file()):
        from xeoncluster.node.errors import TrainingError

        raise TrainingError(f"checkpoint-{step}, which the other ranks resume from, is missing or incomplete in "
                            f"{output_dir}; start a new run without --resume")
    return chosen


def _min_over_ranks(value: int) -> int:
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())
