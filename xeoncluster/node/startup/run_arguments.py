"""TrainingArguments plus the gradient-exchange settings the Trainer has no field for.

A module-level class: the Trainer pickles its arguments into every checkpoint (training_args.bin).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

from xeoncluster.node.checkpoints.async_save import DEFAULT_ASYNC_SAVE
from xeoncluster.node.startup.grad_exchange import DEFAULT_BUCKET_VIEW, GRAD_COMMS, NO_EXCHANGE, PowerSgd


@dataclass
class RunTrainingArguments(TrainingArguments):
    ddp_gradient_as_bucket_view: bool = field(
        default=DEFAULT_BUCKET_VIEW,
        metadata={"help": "DDP gradient_as_bucket_view: gradients live in the all-reduce buckets (no copy)"},
    )
    ddp_grad_comm: str = field(
        default="fp32",
        metadata={
            "help": f"dtype gradients travel in between ranks (resolved from --grad-comm); "
            f"{NO_EXCHANGE!r} sends nothing (benchmarks only)",
            "choices": [*GRAD_COMMS, NO_EXCHANGE],
        },
    )
    async_save: bool = field(
        default=DEFAULT_ASYNC_SAVE,
        metadata={"help": "checkpoints: the step copies the state in memory, a background thread writes the files "
                          "(set from --async-save)"},
    )
    ddp_powersgd_rank: int = field(
        default=PowerSgd.rank,
        metadata={"help": "with --grad-comm powersgd: the rank each gradient matrix is compressed to"},
    )
    ddp_powersgd_start_step: int = field(
        default=PowerSgd.start_step,
        metadata={"help": "with --grad-comm powersgd: steps before it exchange plain fp32 gradients (> 1)"},
    )
    ddp_exchange_clock: bool = field(
        default=False,
        metadata={"help": "benchmarks: every rank writes each gradient bucket's all-reduce launch and "
                  "completion times to exchange_times.rank<N>.json"},
    )
