"""When each optimizer step ended, for measuring steady-state throughput (benchmarks/bench_train.py).

Rank 0 writes `step_times.json` next to metrics.json: seconds since training began at the end of
each step of this invocation. The samples/s in metrics.json also counts the first steps, which pay
for allocations and DDP's first iteration; differences of these times leave them out.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

FILE_NAME = "step_times.json"


class StepClock(TrainerCallback):
    def __init__(self) -> None:
        self.started = 0.0
        self.first_step = 0
        self.ends: list[float] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started, self.first_step, self.ends = time.monotonic(), state.global_step, []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ends.append(time.monotonic() - self.started)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        payload = {"first_step": self.first_step, "step_end_seconds": [round(t, 4) for t in self.ends]}
        (out / FILE_NAME).write_text(json.dumps(payload) + "\n")
