"""How gradients travel between ranks: DDP bucket size, bucket views, static graph, bf16 compression.

The Trainer builds accelerate's `DistributedDataParallelKwargs` from four TrainingArguments
(`ddp_find_unused_parameters`, `ddp_bucket_cap_mb`, `ddp_broadcast_buffers`, `ddp_static_graph`);
`gradient_as_bucket_view` and a communication hook are not among them. accelerate wraps the model
in `prepare_model` with `accelerator.ddp_handler.to_kwargs()` and then calls
`accelerator.ddp_handler.register_comm_hook(model)`, so `tune_trainer` swaps that handler for one
that carries the extra settings, before `train()` wraps the model.

`--grad-comm powersgd` (opt-in, never picked by `auto`) compresses each gradient matrix to a low
rank with torch's PowerSGD hook: fewer bytes on the wire, more arithmetic on the ranks, and a
different result (see docs/benchmarks.md for what it did to MiniLM's loss and speed here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from xeoncluster.node.diagnostics.exchange_clock import ExchangeClock, clock_callback

GRAD_COMMS = ("fp32", "bf16", "powersgd")
# `--grad-comm auto` (the default): gradients travel in the precision the run computes in. A bf16
# run's gradients come out of bf16 matmuls already, so rounding the averaged gradient to bf16 costs
# it nothing it has not accepted, and halves the bytes; an fp32 run keeps an exact fp32 exchange.
AUTO = "auto"
# Benchmarks only (`--ddp_grad_comm none`): skip the exchange, so every rank trains on its own
# gradients. What is left of the 2-rank slowdown is then the ranks' contention for the machine.
NO_EXCHANGE = "none"
DEFAULT_GRAD_COMM = AUTO
DEFAULT_BUCKET_VIEW = True

# Defaults for the TrainingArguments that shape DDP, applied unless the user passes them
# (e.g. `--ddp_bucket_cap_mb 100`). See benchmarks/bench_train.py and the README for the measurements.
TRAINER_DEFAULTS: dict[str, Any] = {
    # The Trainer would turn find_unused_parameters on for every PreTrainedModel, which walks the
    # autograd graph after each forward. A static graph finds unused parameters once, in the first
    # step, and skips the walk from then on; it also lets DDP reuse its bucket order.
    "ddp_static_graph": True,
    # Implied by the static graph (DDP warns when both are on).
    "ddp_find_unused_parameters": False,
}


def resolve_grad_comm(grad_comm: str, precision: str) -> str:
    """`auto` -> bf16 for bf16 runs, fp32 otherwise; explicit choices stay."""
    if grad_comm != AUTO:
        return grad_comm
    return "bf16" if precision == "bf16" else "fp32"


@dataclasses.dataclass(frozen=True)
class PowerSgd:
    """PowerSGD's settings: the rank each gradient matrix is compressed to, and the first compressed step.

    Steps before `start_step` exchange plain fp32 gradients (PowerSGD's warm-up; torch requires > 1).
    """

    rank: int = 4
    start_step: int = 10


def bf16_gloo_hook(process_group, bucket):  # type: ignore[no-untyped-def]  # DDP refuses string annotations on a hook
    """All-reduce a gradient bucket as bf16, halving the bytes on the wire; average; write back as fp32.

    torch's own `default_hooks.bf16_compress_hook` is refused without CUDA/NCCL or XPU ("BF16 all
    reduce communication hook required CUDA 11+ and NCCL 2.10+"); gloo itself reduces bf16 tensors
    on CPU, so this is the same hook. DDP's check goes by the function's name, hence a different
    one; and no annotations: DDP rejects a `bucket` annotation that is not `dist.GradBucket`, and
    this module's annotations are strings.
    """
    import torch
    import torch.distributed as dist

    group = process_group if process_group is not None else dist.group.WORLD
    assert group is not None, "DDP runs its hooks in an initialized process group"
    world_size = group.size()
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(world_size)
    future = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(fut: Any) -> Any:
        buffer.copy_(fut.value()[0])
        return buffer

    return future.then(decompress)


def no_exchange_hook(process_group, bucket):  # type: ignore[no-untyped-def]  # DDP refuses string annotations on a hook
    """Keep this rank's gradients: a future that is already done, with nothing sent."""
    import torch

    future: torch.futures.Future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def exchange_hook(grad_comm: str, powersgd: PowerSgd) -> tuple[Any, Callable[[Any, Any], Any]]:
    """(state, hook) for DDP's `register_comm_hook`: how buckets travel for `grad_comm`."""
    if grad_comm == "bf16":
        return None, bf16_gloo_hook
    if grad_comm == NO_EXCHANGE:
        return None, no_exchange_hook
    if grad_comm == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=powersgd.rank,
                                            start_powerSGD_iter=powersgd.start_step)
        return state, powerSGD_hook.powerSGD_hook
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return None, default_hooks.allreduce_hook


WIRE_BYTES = {"fp32": 4, "bf16": 2, NO_EXCHANGE: 0}


def tuned_ddp_handler(base: Any, grad_comm: str, bucket_view: bool, clock: ExchangeClock | None = None,
                      powersgd: PowerSgd | None = None) -> Any:
    """A copy of accelerate's DistributedDataParallelKwargs `base` with bucket views and our hook."""
    from accelerate.utils import DistributedDataParallelKwargs

    @dataclasses.dataclass
    class TunedDdpKwargs(DistributedDataParallelKwargs):
        grad_comm: str = "fp32"

        def to_dict(self, ignore_keys: tuple[str, ...] = ("comm_hook", "comm_wrapper", "comm_state_option",
                                                           "grad_comm")) -> dict[str, Any]:
            return super().to_dict(ignore_keys=ignore_keys)

        def register_comm_hook(self, model: Any) -> None:
            if self.grad_comm == "fp32" and clock is None:
                super().register_comm_hook(model)  # DDP's own all-reduce
                return
            state, hook = exchange_hook(self.grad_comm, powersgd or PowerSgd())
            model.register_comm_hook(state=state, hook=clock.timed(hook) if clock else hook)

    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(DistributedDataParallelKwargs)}
    fields["gradient_as_bucket_view"] = bucket_view
    return TunedDdpKwargs(**fields, grad_comm=grad_comm)


def tune_trainer(trainer: Any, grad_comm: str, bucket_view: bool) -> None:
    """Give the trainer's accelerator our DDP settings; call before `trainer.train()` wraps the model."""
    if grad_comm not in (*GRAD_COMMS, NO_EXCHANGE):
        raise ValueError(f"grad_comm must be one of {', '.join(GRAD_COMMS)}, not {grad_comm!r}")
    accelerator = trainer.accelerator
    if accelerator.ddp_handler is None:
        from accelerate.utils import DistributedDataParallelKwargs

        accelerator.ddp_handler = DistributedDataParallelKwargs()
    args = trainer.args
    clock = None
    if getattr(args, "ddp_exchange_clock", False):
        clock = ExchangeClock(WIRE_BYTES.get(grad_comm))
        trainer.add_callback(clock_callback(clock))
    powersgd = PowerSgd(getattr(args, "ddp_powersgd_rank", PowerSgd.rank),
                        getattr(args, "ddp_powersgd_start_step", PowerSgd.start_step))
    accelerator.ddp_handler = tuned_ddp_handler(accelerator.ddp_handler, grad_comm, bucket_view, clock, powersgd)


def describe(args: Any, grad_comm: str, bucket_view: bool) -> str:
    """One line for the log: what the gradient exchange does in this run."""
    bucket = args.ddp_bucket_cap_mb if args.ddp_bucket_cap_mb is not None else 25
    parts = [_exchange_words(args, grad_comm), f"{bucket} MB buckets"]
    if bucket_view:
        parts.append("bucket views")
    if args.ddp_static_graph:
        parts.append("static graph")
    if args.ddp_find_unused_parameters:
        parts.append("find unused parameters")
    return "ddp: " + ", ".join(parts)


def _exchange_words(args: Any, grad_comm: str) -> str:
    if grad_comm == NO_EXCHANGE:
        return "no gradient exchange (benchmark only)"
    if grad_comm == "powersgd":
        return f"powersgd gradients (rank {args.ddp_powersgd_rank} from step {args.ddp_powersgd_start_step})"
    return f"{grad_comm} gradients"


def log_callback() -> Any:
    """A TrainerCallback: rank 0 says once, when a multi-rank run starts, how gradients are exchanged."""
    from transformers import TrainerCallback

    class GradExchangeLog(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if args.world_size > 1 and state.is_world_process_zero:
                print(describe(args, args.ddp_grad_comm, args.ddp_gradient_as_bucket_view), flush=True)

    return GradExchangeLog()
