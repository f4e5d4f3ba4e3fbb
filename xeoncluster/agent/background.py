"""What the agent's watches share: their `_watch()` runs in a daemon thread for as long as the `with`
block around a job does, and the block's end waits for it."""
from __future__ import annotations

import threading
from types import TracebackType


class BackgroundWatch:
    _done: threading.Event  # set when the job ended: `_watch()` returns soon after
    _thread: threading.Thread | None

    def _start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        raise NotImplementedError

    def _ended(self) -> None:
        """After the thread has ended: what the watch must close."""

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._ended()
