"""Command-line parsing for `python -m xeoncluster.node`; the commands themselves live elsewhere."""

from __future__ import annotations

import argparse
from typing import Any

from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.startup.grad_exchange import AUTO, GRAD_COMMS
from xeoncluster.node.startup.precision import PRECISIONS
from xeoncluster.node.startup.stack_check import BACKENDS, STACKS
from xeoncluster.node.tasks.glue_data import TASKS

_PASS_THROUGH = (
    "Unknown --key value options are passed to transformers.TrainingArguments "
    "(e.g. --logging_steps 1 --warmup_steps 100) and win over the defaults set here."
)


def _common(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data and model")
    data.add_argument("--dataset", help="Hugging Face dataset name")
    data.add_argument("--dataset-config", help="dataset configuration name")
    data.add_argument("--train-file", help="local training file")
    data.add_argument("--eval-file", help="local evaluation file")
    data.add_argument("--model", help="hub id or local directory")
    data.add_argument("--demo", metavar="DIR", help="use (and build if missing) the demo assets in DIR")
    data.add_argument("--max-train-samples", type=int)
    data.add_argument("--max-eval-samples", type=int)
    data.add_argument("--max-seq-length", type=int, help="default 384 (demo: 64)")
    data.add_argument("--cache-dir", help="tokenized features cache (default ~/.cache/xeoncluster/features)")
    _training(parser.add_argument_group("training"))


def _training(run: argparse._ArgumentGroup) -> None:
    run.add_argument("--output-dir", help="where checkpoints, the model and metrics.json go")
    run.add_argument("--epochs", type=float, help="default 1 (demo: squad 8, glue 3)")
    run.add_argument("--max-steps", type=int, default=-1)
    run.add_argument("--batch-size", type=int, help="per-rank batch size, default 8 (demo: 16)")
    run.add_argument("--lr", type=float, help="default 3e-5 (demo: squad 1e-3, glue 5e-4)")
    run.add_argument("--seed", type=int, default=42)
    run.add_argument("--save-steps", type=int, help="checkpoint every N steps (keeps the last 2)")
    run.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    run.add_argument(
        "--warm-data",
        action="store_true",
        help="only build what a rank needs before it trains (the demo assets, the data, the model files and "
        "the tokenized features cache) on this node, then exit: the run agent does this on a replacement "
        "while the run trains on",
    )
    run.add_argument(
        "--async-save",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a save copies the state in memory and the files are written in the background, so the step "
        "waits only for the copy (default: off)",
    )
    run.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the model (TrainingArguments torch_compile, inductor): the first steps pay for "
        "compiling (default: off)",
    )
    run.add_argument("--precision", choices=PRECISIONS, help="default auto (demo: fp32)")
    run.add_argument("--stack", choices=STACKS, help="software stack (default: $XC_STACK or stock)")
    run.add_argument("--ddp-backend", choices=BACKENDS, default="auto")
    run.add_argument(
        "--grad-comm",
        choices=(AUTO, *GRAD_COMMS),
        help="dtype gradients travel in between ranks: bf16 halves the bytes; "
        "default auto: bf16 when training in bf16, fp32 otherwise",
    )
    run.add_argument(
        "--eval-before",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also evaluate the untrained model",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m xeoncluster.node",
        description="Fine-tune on SQuAD or GLUE. Unknown --key value options go to TrainingArguments.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    squad = sub.add_parser("squad", help="extractive question answering", description=_PASS_THROUGH)
    _common(squad)
    squad.add_argument("--doc-stride", type=int, help="default 128 (demo: 24)")
    squad.add_argument("--version-2-with-negative", choices=("auto", "true", "false"), default="auto")
    glue = sub.add_parser("glue", help="GLUE sentence(-pair) classification", description=_PASS_THROUGH)
    glue.add_argument("--task", choices=sorted(TASKS), default="mrpc")
    _common(glue)
    demo = sub.add_parser("demo-assets", help="build the offline demo model and data")
    demo.add_argument("--out", required=True, help="directory for model/, squad/ and glue/")
    demo.add_argument("--seed", type=int, default=0)
    return parser


def trainer_overrides(unknown: list[str]) -> dict[str, Any]:
    """Parse unknown `--key value` options as TrainingArguments fields (typed by transformers)."""
    if not unknown:
        return {}
    from transformers import HfArgumentParser
    from transformers.hf_argparser import DataClassType

    from xeoncluster.node.startup.run_arguments import RunTrainingArguments

    parser = HfArgumentParser(DataClassType(RunTrainingArguments))
    # SUPPRESS keeps only the options actually given, so our own defaults survive.
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    namespace, rest = parser.parse_known_args(unknown)
    if rest:
        raise TrainingError(f"unrecognized arguments: {' '.join(rest)}")
    return vars(namespace)


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, Any]]:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command == "demo-assets" and unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args, trainer_overrides(unknown)
