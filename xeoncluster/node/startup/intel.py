"""The legacy Intel stack: oneCCL process groups and IPEX-optimized model and optimizer.

Only importable where the intel stack (xeoncluster/ami/stacks.yaml) is installed; stack_check.py checks that first.
"""

from __future__ import annotations

import os
from typing import Any


def register_ccl_backend() -> None:
    """Importing the bindings registers the 'ccl' torch.distributed backend."""
    os.environ.setdefault("CCL_WORKER_COUNT", "1")
    import oneccl_bindings_for_pytorch  # noqa: F401


def ipex_trainer_class(base: type, precision: str) -> type:
    """A Trainer subclass that runs ipex.optimize on the model and its optimizer once created."""
    import intel_extension_for_pytorch as ipex
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32

    class IpexTrainer(base):
        model: Any
        optimizer: Any

        def create_optimizer(self, *args: Any, **kwargs: Any) -> Any:
            optimizer = super().create_optimizer(*args, **kwargs)
            self.model.train()
            self.model, self.optimizer = ipex.optimize(
                self.model, optimizer=optimizer, dtype=dtype, inplace=True
            )
            return self.optimizer

    return IpexTrainer
