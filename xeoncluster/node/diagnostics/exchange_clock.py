"""When each gradient bucket's all-reduce was launched and when it completed (benchmarks only).

Opt-in with `-- --ddp_exchange_clock true`: the run's exchange hook is wrapped so that every bucket
records (launched, completed, bytes on the wire) on this rank's monotonic clock, and every rank
writes `exchange_times.rank<N>.json` next to metrics.json, one list of buckets per optimizer step.
The local nodes of one machine share that clock, so benchmarks/bench_train.py can line the ranks up.
Without the option nothing here runs. The fp32 exchange then goes through torch's `allreduce_hook`,
the Python form of what DDP does without a hook.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FILE_NAME = "exchange_times.rank{rank}.json"


class ExchangeClock:
    def __init__(self, bytes_per_element: int | None) -> None:
        """`bytes_per_element` on the wire; None when the hook compresses (counted as fp32 then)."""
        self.bytes_per_element = bytes_per_element
        self._lock = threading.Lock()
        self._pending: list[list[float]] = []
        self.steps: list[list[list[float]]] = []

    def timed(self, hook: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """`hook` with every bucket's launch and completion recorded."""
        clock = self

        def timed_exchange(state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses string annotations
            launched = time.monotonic()
            per_element = 4 if clock.bytes_per_element is None else clock.bytes_per_element
            size = bucket.buffer().numel() * per_element

            def completed(future):  # type: ignore[no-untyped-def]
                clock.record(launched, time.monotonic(), size)
                return future.value()

            return hook(state, bucket).then(completed)

        return timed_exchange

    def record(self, launched: float, completed: float, size: int) -> None:
        with self._lock:
            self._pending.append([round(launched, 6), round(completed, 6), size])

    def close_step(self) -> None:
        """The buckets since the last call belong to the step that just ended (DDP waits for all of them)."""
        with self._lock:
            buckets, self._pending = self._pending, []
        self.steps.append(buckets)

    def payload(self, rank: int) -> dict[str, Any]:
        return {"rank": rank, "bytes_per_element": self.bytes_per_element, "steps": self.steps}


def clock_callback(clock: ExchangeClock) -> Any:
    """A TrainerCallback: closes the clock's step at each step end; every rank writes its file at the end."""
    from transformers import TrainerCallback

    class ExchangeClockWriter(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock.close_step()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            out = Path(args.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            rank = args.process_index
            (out / FILE_NAME.format(rank=rank)).write_text(json.dumps(clock.payload(rank)) + "\n")

    return ExchangeClockWriter()
