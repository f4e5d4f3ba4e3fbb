"""How a user's script learns that it must stop (a cancel, a node about to be replaced): SIGTERM on
every rank, and the stop file `$XC_STOP_FILE` on every node, which it may poll instead.

A script that handles SIGTERM itself keeps its handler. Otherwise this one stands in: it creates the
stop file, lets the Trainer stop at its next step when the script uses one, and else gives the script
`XC_STOP_GRACE` seconds (default 30) to save and exit before it is interrupted, and 10 more before the
rank exits: a rank blocked in a collective with a peer that already left would otherwise never end.
"""
from __future__ import annotations

import _thread
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from xeoncluster.node.events.events import EXIT_STOPPED
from xeoncluster.node.rank_env import XC_STOP_GRACE

DEFAULT_GRACE = 30.0
HARD_EXIT_AFTER = 10.0


class StopSignal:
    def __init__(self, stop_file: Path, grace: float, trainer_stops: Callable[[], bool],
                 on_hard_exit: Callable[[], None]) -> None:
        self.stop_file, self.grace = stop_file, grace
        self.trainer_stops, self.on_hard_exit = trainer_stops, on_hard_exit
        self.interrupted = False
        self.signalled = False

    def install(self) -> StopSignal:
        signal.signal(signal.SIGTERM, self._on_term)
        return self

    @property
    def requested(self) -> bool:
        return self.stop_file.exists()

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        if self.signalled:  # nodes on one machine see each other's ranks: the signal may come twice
            return
        self.signalled = True
        self.stop_file.parent.mkdir(parents=True, exist_ok=True)
        self.stop_file.touch()
        if self.trainer_stops():
            return  # the Trainer's callback sees the file and stops every rank at the next step
        for delay, action in ((self.grace, self._interrupt), (self.grace + HARD_EXIT_AFTER, self._hard_exit)):
            timer = threading.Timer(delay, action)
            timer.daemon = True  # a script that exits in time must not wait for them
            timer.start()

    def _interrupt(self) -> None:
        self.interrupted = True
        _thread.interrupt_main()

    def _hard_exit(self) -> None:
        self.on_hard_exit()
        os._exit(EXIT_STOPPED)


def grace_from_env(env: dict[str, str] | os._Environ[str]) -> float:
    return float(env.get(XC_STOP_GRACE, DEFAULT_GRACE))
