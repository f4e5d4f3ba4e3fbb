"""One rank of the built-in tasks with `ipex.optimize` on the model and optimizer, for benchmarks/bench_ipex.py.

`python benchmarks/ipex_rank.py squad ...` takes the arguments of `python -m xeoncluster.node squad`. The
intel stack (`--stack intel`) also needs oneccl_bind_pt, which is not on PyPI, and a transformers that
still accepts ccl; a single rank needs neither, so this plans the stock stack and turns IPEX on, the
way the intel stack's Trainer applies it (xeoncluster/node/startup/intel.py).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from xeoncluster.node import __main__ as node_main
from xeoncluster.node.startup import runner


def _with_ipex(plan_stack: Any) -> Any:
    def plan(*args: Any, **kwargs: Any) -> Any:
        return dataclasses.replace(plan_stack(*args, **kwargs), use_ipex=True)

    return plan


if __name__ == "__main__":
    runner.plan_stack = _with_ipex(runner.plan_stack)  # type: ignore[attr-defined]
    sys.exit(node_main.main(sys.argv[1:]))
