"""TrainingArguments and the Trainer for a run."""

from __future__ import annotations

import os
import sys
from typing import Any

from xeoncluster.node.events.trackers import add_tensorboard, tensorboard_available
from xeoncluster.node.startup.elastic_batch import elastic_settings
from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.startup.run_config import RunConfig
from xeoncluster.node.startup.stack_check import StackPlan

# A ratio of the total steps: about 20 progress lines whatever the run length.
DEFAULT_LOGGING_STEPS = 0.05
# Four evaluations during training give loss.png an eval curve; before/after come from the scoring passes.
DEFAULT_EVAL_STEPS = 0.25
# See docs/benchmarks.md (torch.compile on CPU training) for what it costs and saves.
DEFAULT_COMPILE = False


def training_arguments(config: RunConfig, plan: StackPlan, precision: str, has_eval: bool = False) -> Any:
    """Build TrainingArguments; with world size > 1 this also joins the process group."""
    from xeoncluster.node.startup.grad_exchange import TRAINER_DEFAULTS, resolve_grad_comm
    from xeoncluster.node.startup.run_arguments import RunTrainingArguments

    tunables = config.tunables
    settings: dict[str, Any] = {
        "output_dir": str(config.output_dir),
        "per_device_train_batch_size": tunables.batch_size,
        "per_device_eval_batch_size": tunables.batch_size * 2,
        "num_train_epochs": tunables.epochs,
        "max_steps": config.max_steps,
        "learning_rate": tunables.lr,
        "seed": config.seed,
        "save_strategy": "steps" if config.save_steps else "no",
        "save_steps": config.save_steps or 500,
        "save_total_limit": 2,
        # Every node needs the checkpoint to resume from: nodes don't share a filesystem.
        "save_on_each_node": True,
        "logging_steps": DEFAULT_LOGGING_STEPS,
        "eval_strategy": "steps" if has_eval else "no",
        "eval_steps": DEFAULT_EVAL_STEPS,
        "report_to": "none",  # TensorBoard is added by make_trainer, made durable at checkpoints
        "disable_tqdm": not sys.stdout.isatty(),
        "use_cpu": True,
        "bf16": precision == "bf16",
        "dataloader_num_workers": 0,
        "torch_compile": DEFAULT_COMPILE if config.torch_compile is None else config.torch_compile,
        "ddp_grad_comm": resolve_grad_comm(config.grad_comm, precision),
        **_known_fields(RunTrainingArguments, TRAINER_DEFAULTS),
    }
    if plan.backend is not None:
        settings["ddp_backend"] = plan.backend
    if config.async_save is not None:
        settings["async_save"] = config.async_save
    settings.update(config.trainer_overrides)  # explicit pass-through options win
    # ...over the world the run now has: a shrunk or regrown run keeps the global batch it started with.
    elastic, reshaped = elastic_settings(settings, os.environ)
    settings.update(elastic)
    try:
        args = RunTrainingArguments(**settings)
    except (ValueError, TypeError) as exc:
        raise TrainingError(f"invalid trainer arguments: {exc}") from exc
    if reshaped and args.process_index == 0:
        print(f"training: {reshaped}", file=sys.stderr, flush=True)
    _check_async_save(args, plan)
    return args


def _check_async_save(args: Any, plan: StackPlan) -> None:
    from xeoncluster.node.checkpoints.async_save import unsupported_reason

    reason = unsupported_reason(args, plan.stack) if args.async_save else None
    if reason is not None:
        args.async_save = False
        if args.process_index == 0:
            print(f"training: warning: checkpoints are written in the step: --async-save does not support {reason}",
                  file=sys.stderr)


def _known_fields(cls: type, defaults: dict[str, Any]) -> dict[str, Any]:
    """Only the defaults this transformers has a field for (the intel stack pins an older one)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in defaults.items() if k in names}


def make_trainer(
    args: Any,
    model: Any,
    tokenizer: Any,
    datasets: tuple[Any, Any | None],
    plan: StackPlan,
    precision: str,
) -> Any:
    """`datasets` is (train, eval); eval may be None."""
    from transformers import PrinterCallback, Trainer

    from xeoncluster.node.checkpoints.node_checkpoint import NodeLocalWeights, SharedRngStates
    from xeoncluster.node.diagnostics.step_clock import StepClock
    from xeoncluster.node.events.progress_lines import ConciseLog
    from xeoncluster.node.startup.grad_exchange import log_callback, tune_trainer

    trainer_class: type = Trainer
    if args.async_save:
        from xeoncluster.node.checkpoints.async_save import async_save_trainer_class

        trainer_class = async_save_trainer_class(trainer_class)
    if plan.use_ipex:
        from xeoncluster.node.startup.intel import ipex_trainer_class

        trainer_class = ipex_trainer_class(Trainer, precision)
    train_dataset, eval_dataset = datasets
    trainer = trainer_class(
        model=model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset, processing_class=tokenizer
    )
    tune_trainer(trainer, args.ddp_grad_comm, args.ddp_gradient_as_bucket_view)
    trainer.remove_callback(PrinterCallback)
    if tensorboard_available() and "tensorboard" not in (args.report_to or []):  # else the user's own writes it
        add_tensorboard(trainer)
    trainer.add_callback(ConciseLog())
    if not args.async_save:  # the background writer does their work
        trainer.add_callback(NodeLocalWeights())
        trainer.add_callback(SharedRngStates())
    trainer.add_callback(log_callback())
    trainer.add_callback(StepClock())
    return trainer
