"""`--compile` of the built-in tasks reaches TrainingArguments; nothing is trained or compiled here."""

from __future__ import annotations

from pathlib import Path

import pytest

from xeoncluster.node.startup.cli import parse
from xeoncluster.node.startup.run_config import from_args
from xeoncluster.node.startup.stack_check import StackPlan
from xeoncluster.node.startup.trainer_setup import DEFAULT_COMPILE, training_arguments

SINGLE = StackPlan(stack="stock", backend=None, use_ipex=False)


@pytest.mark.parametrize(("options", "expected"), [
    ((), DEFAULT_COMPILE),
    (("--compile",), True),
    (("--no-compile",), False),
    (("--no-compile", "--torch_compile", "true"), True),
])
def test_compile_reaches_the_training_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                options: tuple[str, ...], expected: bool) -> None:
    monkeypatch.delenv("ACCELERATE_DYNAMO_BACKEND", raising=False)
    args, overrides = parse(["squad", "--demo", str(tmp_path / "demo"), "--output-dir", str(tmp_path / "out"),
                             *options])
    arguments = training_arguments(from_args(args, overrides), SINGLE, "fp32")
    assert arguments.torch_compile is expected
    assert arguments.torch_compile_backend == ("inductor" if expected else None)
