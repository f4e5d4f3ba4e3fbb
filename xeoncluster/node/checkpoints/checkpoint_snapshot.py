"""A checkpoint copied in memory at the step that saves it: what the HF Trainer would write to disk,
as CPU copies that training no longer touches, so that checkpoint_writer.py can write the files
while the next steps run. Copying takes a fraction of the write (memory bandwidth, no serialization).
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class CheckpointSnapshot:
    directory: Path
    step: int
    weights: dict[str, Any]         # as save_pretrained would write them: tied copies dropped, names reverted
    model: Any                      # its config (and generation config): training never changes them
    processing_class: Any           # the tokenizer, saved beside the weights like the Trainer does
    files: dict[str, bytes]         # small files already serialized: rng states, training_args.bin
    optimizer: dict[str, Any] | None
    scheduler: dict[str, Any] | None
    scaler: dict[str, Any] | None
    trainer_state: str              # trainer_state.json's text, as of this step


def weights_copy(model: Any) -> dict[str, Any]:
    """The tensors save_pretrained would write, cloned (a plain state_dict shares the live parameters)."""
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    state = model.state_dict()
    for key in model._keys_to_ignore_on_save or ():
        state.pop(key, None)
    state = revert_weight_conversion(model, remove_tied_weights_from_state_dict(state, model))
    return {name: tensor.detach().clone().contiguous() for name, tensor in state.items()}


def stamp_config(model: Any) -> None:
    """What save_pretrained records in the config before writing it."""
    model.config.dtype = str(model.dtype).split(".")[1]
    model.config.architectures = [model.__class__.__name__.removeprefix("FSDP")]


def deep_copy(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """A state_dict's tensors are the live ones (the optimizer's moments); deepcopy clones each once."""
    return None if state is None else copy.deepcopy(state)


def serialized(value: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def rng_state_bytes() -> bytes:
    """rng_state*.pth as Trainer._save_rng_state writes it on a CPU machine (no accelerator states)."""
    import numpy as np
    import torch

    return serialized({"python": random.getstate(), "numpy": np.random.get_state(),
                       "cpu": torch.random.get_rng_state()})


def trainer_state_json(trainer: Any) -> str:
    """Trainer._save_checkpoint's trainer state: the stateful callbacks' state, then the JSON text."""
    from transformers.trainer_callback import ExportableState

    state = trainer.state
    for callback in [*trainer.callback_handler.callbacks, trainer.control]:
        if isinstance(callback, ExportableState):
            name = callback.__class__.__name__
            if isinstance(state.stateful_callbacks[name], list):
                state.stateful_callbacks[name].append(callback.state())
            else:
                state.stateful_callbacks[name] = callback.state()
    return json.dumps(dataclasses.asdict(state), indent=2, sort_keys=True) + "\n"
