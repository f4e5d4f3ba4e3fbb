"""One bake per image key at a time: a flock file under $XEONCLUSTER_HOME/locks/.

Two `up`s that find no image for the same key would both bake it, and the later bake replaces
the image the earlier cluster's nodes already run on. The second one waits here instead, and
then decides the image again (it finds the first one's bake and reuses it).
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TextIO

from xeoncluster.cluster.state import xeoncluster_home


@dataclass
class BakeLock:
    provider: str
    key: str
    _handle: TextIO | None = field(default=None, repr=False)

    @property
    def path(self) -> str:
        return str(xeoncluster_home() / "locks" / f"bake-{self.provider}-{self.key[:32]}.lock")

    def acquire(self, waiting: Callable[[str], None]) -> None:
        """Blocks until no other process bakes this key; `waiting` is told once if it has to wait."""
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        with ExitStack() as on_failure:
            handle = on_failure.enter_context(open(self.path, "a+"))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waiting(f"waiting for another up that is baking image {self.key[:12]}")
                fcntl.flock(handle, fcntl.LOCK_EX)
            on_failure.pop_all()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    @property
    def held(self) -> bool:
        return self._handle is not None
