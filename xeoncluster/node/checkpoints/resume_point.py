"""Find the checkpoint to resume from."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
_STATE = "trainer_state.json"
_WEIGHTS = "model.safetensors"
# The files whose presence makes a checkpoint complete; whoever writes one writes them last.
MARKERS = (_WEIGHTS, _STATE)


def is_complete(checkpoint: Path) -> bool:
    return all((checkpoint / name).is_file() for name in MARKERS)


def _numbered(output_dir: Path) -> list[tuple[int, Path]]:
    return sorted((int(match.group(1)), path) for path in output_dir.iterdir()
                  if (match := _CHECKPOINT.fullmatch(path.name)) and path.is_dir())


def last_complete_checkpoint(output_dir: Path) -> Path | None:
    """The highest checkpoint-N that holds both trainer_state.json and the weights. Rank 0's
    Trainer writes the state last; other nodes write the weights last (node_checkpoint.py), and the
    background writer renames the weights, then the state, last of all (checkpoint_writer.py), so
    either way a checkpoint cut short by a kill is skipped."""
    if not output_dir.is_dir():
        return None
    candidates = [(step, path) for step, path in _numbered(output_dir) if is_complete(path)]
    return max(candidates)[1] if candidates else None


def rotate(output_dir: Path, keep: int | None) -> None:
    """Keep the newest `keep` complete checkpoints. Unlike the Trainer's own rotation (newest folder
    first, complete or not), an unfinished folder never counts: it never pushes out a complete one.
    Unfinished folders older than the oldest kept are dead ends and go too; newer ones are left to be
    written again when training reaches them."""
    if keep is None or keep <= 0:
        return
    numbered = _numbered(output_dir)
    complete = [step for step, path in numbered if is_complete(path)]
    if len(complete) < keep:
        return
    oldest_kept = complete[-keep]
    for step, path in numbered:
        if step < oldest_kept:
            shutil.rmtree(path, ignore_errors=True)


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
    if not is_complete(chosen):
        from xeoncluster.node.startup.errors import TrainingError

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
