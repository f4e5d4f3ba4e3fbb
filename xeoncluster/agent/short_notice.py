"""A notice too short for a replacement (agent/proactive.py) to be ready before the node's end: the run
trains on without the node instead of waiting for one, idle.

No replacement is launched while the ranks train: the job on the nodes left is started ahead and held
(agent/prestart.py), the ranks train on until the notice's deadline is near and stop there by themselves,
checkpointed, and the recovery drops the node (agent/restart.py, --train-while-replacing) and releases the
held job. The replacement is launched then, and the run grows back once it is ready (agent/regrowth.py).
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from xeoncluster.agent.prestart import DEADLINE_MARGIN_SECONDS
from xeoncluster.providers.base import Node


def too_short(deadline: float | None, now: float, replace_seconds: float) -> bool:
    """Whether a notice leaves the old job less time than a replacement takes to be ready."""
    return deadline is not None and deadline - now - DEADLINE_MARGIN_SECONDS < replace_seconds


class TrainOnWithout:
    """Stands where a Replacement would (the recovery waits for it the same way), and brings no node: its
    thread starts the job on the nodes left ahead of the change."""

    new: Node | None = None
    error = ""

    def __init__(self, old: Node, start_ahead: Callable[[], None]) -> None:
        self.old = old
        self._thread = threading.Thread(target=start_ahead, name=f"xc-without-{old.name}", daemon=True)

    def start(self) -> TrainOnWithout:
        self._thread.start()
        return self

    def wait(self) -> Node | None:
        self._thread.join()
        return None
