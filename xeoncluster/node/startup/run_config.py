"""The settings of one training run, and the defaults that depend on the task and on --demo."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xeoncluster.node.rank_env import XC_STACK
from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.startup.grad_exchange import DEFAULT_GRAD_COMM
from xeoncluster.node.tasks.demo_assets import DemoLayout
from xeoncluster.node.tasks.sources import DataSource

DEFAULT_MODEL = "bert-base-uncased"
DEFAULT_CACHE_ROOT = Path("~/.cache/xeoncluster/features")


@dataclass(frozen=True)
class Tunables:
    """Settings whose default differs between a real run and the tiny --demo model."""

    epochs: float
    batch_size: int
    lr: float
    max_seq_length: int
    doc_stride: int
    eval_before: bool
    precision: str


REAL_DEFAULTS = Tunables(
    epochs=1, batch_size=8, lr=3e-5, max_seq_length=384, doc_stride=128, eval_before=False, precision="auto"
)
# A from-scratch 2-layer BERT needs a far larger learning rate; demo texts fit in about 64 tokens.
# Its matrices are too small for bf16 to pay off (measured 7x slower than fp32 on AVX512-BF16).
DEMO_DEFAULTS = {
    "squad": Tunables(
        epochs=8, batch_size=16, lr=1e-3, max_seq_length=64, doc_stride=24, eval_before=True, precision="fp32"
    ),
    "glue": Tunables(
        epochs=3, batch_size=16, lr=5e-4, max_seq_length=64, doc_stride=24, eval_before=True, precision="fp32"
    ),
}


@dataclass(frozen=True)
class RunConfig:
    task: str  # "squad" | "glue"
    output_dir: Path
    model: str
    source: DataSource
    tunables: Tunables
    glue_task: str = "mrpc"
    max_steps: int = -1
    seed: int = 42
    save_steps: int | None = None
    async_save: bool | None = None  # None: async_save.DEFAULT_ASYNC_SAVE
    torch_compile: bool | None = None  # None: trainer_setup.DEFAULT_COMPILE
    resume: bool = False
    warm_data: bool = False  # only the data work, single process, then exit (runner._warm_data)
    version_2_with_negative: str = "auto"
    stack: str = "stock"
    backend: str = "auto"
    grad_comm: str = DEFAULT_GRAD_COMM
    cache_dir: Path | None = None
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    demo_dir: Path | None = None
    trainer_overrides: dict[str, Any] = field(default_factory=dict)


def _pick(given: Any, default: Any) -> Any:
    return default if given is None else given


def _tunables(args: Any, defaults: Tunables) -> Tunables:
    return Tunables(
        **{
            f.name: _pick(getattr(args, f.name, None), getattr(defaults, f.name))
            for f in dataclasses.fields(Tunables)
        }
    )


def _demo_source(task: str, layout: DemoLayout) -> DataSource:
    if task == "squad":
        return DataSource(train_file=layout.squad_train, eval_file=layout.squad_eval)
    return DataSource(train_file=layout.mrpc_train, eval_file=layout.mrpc_dev)


def _source(args: Any) -> DataSource:
    if args.dataset and (args.train_file or args.eval_file):
        raise TrainingError("pass either --dataset or --train-file/--eval-file, not both")
    if args.eval_file and not args.train_file:
        raise TrainingError("--eval-file needs --train-file")
    return DataSource(
        dataset=args.dataset,
        dataset_config=args.dataset_config,
        train_file=Path(args.train_file) if args.train_file else None,
        eval_file=Path(args.eval_file) if args.eval_file else None,
    )


def from_args(args: Any, trainer_overrides: dict[str, Any]) -> RunConfig:
    """Turn parsed CLI arguments into a RunConfig; --demo fills model, data and demo defaults."""
    demo_dir = Path(args.demo).expanduser().resolve() if args.demo else None
    if demo_dir is not None:
        layout = DemoLayout(demo_dir)
        if args.model or args.dataset or args.train_file:
            raise TrainingError("--demo supplies the model and data; drop --model/--dataset/--train-file")
        model, source = str(layout.model), _demo_source(args.command, layout)
        tunables = _tunables(args, DEMO_DEFAULTS[args.command])
    else:
        model, source = args.model or DEFAULT_MODEL, _source(args)
        tunables = _tunables(args, REAL_DEFAULTS)
    if args.output_dir:
        output_dir = Path(args.output_dir)
    elif demo_dir is not None:
        output_dir = demo_dir / "runs" / args.command
    else:
        raise TrainingError("--output-dir is required")
    return RunConfig(
        task=args.command,
        output_dir=output_dir,
        model=model,
        source=source,
        tunables=tunables,
        glue_task=getattr(args, "task", None) or "mrpc",
        max_steps=args.max_steps,
        seed=args.seed,
        save_steps=args.save_steps,
        async_save=args.async_save,
        torch_compile=args.compile,
        resume=args.resume,
        warm_data=args.warm_data,
        version_2_with_negative=getattr(args, "version_2_with_negative", "auto"),
        stack=args.stack or os.environ.get(XC_STACK) or "stock",
        backend=args.ddp_backend,
        grad_comm=getattr(args, "grad_comm", None) or DEFAULT_GRAD_COMM,
        cache_dir=Path(args.cache_dir).expanduser() if args.cache_dir else None,
        max_train_samples=args.max_train_samples,
        max_eval_samples=args.max_eval_samples,
        demo_dir=demo_dir,
        trainer_overrides=trainer_overrides,
    )
