"""Model weights in every node's checkpoints, so every node can resume.

With save_on_each_node, the Trainer writes optimizer, scheduler and trainer state on each node,
but transformers 5 lets only global rank 0 write the model weights (save_pretrained checks the
torch.distributed rank). Without weights the other nodes cannot resume, so the first rank of each
other node writes them itself.
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
