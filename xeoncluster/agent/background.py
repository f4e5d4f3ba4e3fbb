"""What the agent's watches share: their `_watch()` runs in a daemon thread for as long as the `with`
block around a job does, and the block's end waits for it, for a while."""
from __future__ import annotations

import threading
from types import TracebackType

# How long the end of a job waits for a watch. A watch's SSH command to a node that vanished without a
# reset (a reclaimed instance) never returns: waiting for it hung the agent after the job had ended,
# so the run was never recovered. Such a thread is left behind (a daemon), and the run goes on.
JOIN_SECONDS = 10.0


class BackgroundWatch:
    _done: threading.Event  # set when the job ended: `_watch()` returns soon after
    _thread: threading.Thread | None
    join_seconds: float = JOIN_SECONDS

    def _start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        raise NotImplementedError

    def _ended(self) -> None:
        """After the thread has ended: what the watch must close."""

    def _interrupt(self) -> None:
        """At the job's end, before waiting for the thread: cut short what it may be blocked in."""

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._done.set()
        self._interrupt()
        if self._thread is not None:
            self._thread.join(self.join_seconds)
            if self._thread.is_alive():
                return  # still inside a call to a lost node: what it holds is left to it
        self._ended()
