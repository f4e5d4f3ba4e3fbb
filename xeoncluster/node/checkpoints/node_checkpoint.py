"""Everything a rank needs to resume in every node's checkpoints, so any node's copy can restore any node.

With save_on_each_node, the Trainer writes optimizer, scheduler and trainer state on each node,
but transformers 5 lets only global rank 0 write the model weights (save_pretrained checks the
torch.distributed rank). Without weights the other nodes cannot resume, so the first rank of each
other node writes them itself. Each rank's RNG state is written only where that rank runs; they are
shared too, so a replacement node restored from a survivor's checkpoint continues exactly.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

WEIGHTS = "model.safetensors"


class NodeLocalWeights(TrainerCallback):
    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not args.save_on_each_node or not args.should_save or args.process_index == 0 or model is None:
            return
        import safetensors.torch

        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        model.config.to_json_file(str(checkpoint / "config.json"))
        staging = checkpoint / f".{WEIGHTS}.partial"
        safetensors.torch.save_model(model, str(staging))
        # Renamed last: a checkpoint counts as complete only once its weights are whole.
        staging.rename(checkpoint / WEIGHTS)


class SharedRngStates(TrainerCallback):
    """Every rank's rng_state_{rank}.pth on every node (all ranks take part in one all_gather)."""

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not shares_rng_states(args):
            return
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        own = checkpoint / f"rng_state_{args.process_index}.pth"
        gathered = gather_rng_states(args, own.read_bytes() if own.exists() else None)
        if args.local_process_index != 0:
            return
        for rank, data in gathered.items():
            target = checkpoint / f"rng_state_{rank}.pth"
            if data is not None and not target.exists():
                staging = checkpoint / f".{target.name}.partial"
                staging.write_bytes(data)
                staging.rename(target)


def shares_rng_states(args: Any) -> bool:
    import torch.distributed as dist

    return bool(args.save_on_each_node) and args.world_size > 1 and dist.is_initialized()


def gather_rng_states(args: Any, own: bytes | None) -> dict[int, bytes | None]:
    """Every rank's saved RNG state, by rank: a collective, every rank calls it at the same save."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * args.world_size
    dist.all_gather_object(gathered, (args.process_index, own))
    return dict(gathered)


def rng_state_for_world(checkpoint: Path, rank: int, world_size: int) -> Path | None:
    """The RNG state the Trainer looks for in `checkpoint` on this rank, from what the checkpoint holds when
    it was saved by another world (a shrunk or regrown run): rng_state.pth for one rank, rng_state_RANK.pth
    for several. Rank 0 carries on rank 0's state; another rank with none of its own starts its own stream
    (the Trainer says so). Returns the file written, if one was."""
    single, own = checkpoint / "rng_state.pth", checkpoint / f"rng_state_{rank}.pth"
    wanted, source = (single, checkpoint / "rng_state_0.pth") if world_size <= 1 else (own, single)
    if wanted.exists() or not source.exists() or (world_size > 1 and rank != 0):
        return None
    staging = checkpoint / f".{wanted.name}.partial"
    staging.write_bytes(source.read_bytes())
    staging.rename(wanted)
    return wanted
