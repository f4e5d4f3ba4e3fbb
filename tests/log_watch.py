"""Wait on a run through one `xeoncluster logs -f RUN`, read in the background, instead of a `runs --json`
every few seconds.

Each look of `runs --json` is a CLI process of about 0.9 CPU-seconds (its imports, a config, an SSH
handshake). The scenario tests wait on runs for most of their minutes, beside other tests training on
the same two cores: those looks took CPU from the very runs they waited on. `logs -f` is one process
and one connection that reads the log once a second, and says a run's steps, swaps and end as they come.
"""
from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

FINISHED = ("succeeded", "failed", "cancelled")


class LogWatch:
    """`argv` is `xeoncluster ... logs -f RUN`; its lines are kept as they come."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Any) -> None:
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        self.proc.wait()
        with self._changed:
            self._changed.notify_all()

    def until(self, what: str, found: Callable[[str], bool], timeout: float) -> bool:
        """Waits until `found(text)`; False if the follow ended first (the run ended, or the connection
        was lost for good). An AssertionError, with the log's end, if neither came within `timeout`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not found("\n".join(self.lines)):
                if self.proc.poll() is not None and not self._reader.is_alive():
                    return False
                left = deadline - time.monotonic()
                assert left > 0, f"never: {what} within {timeout:.0f}s\n" + "\n".join(self.lines[-40:])
                self._changed.wait(min(left, 5.0))
        return True

    def count(self, what: str, line: str, times: int, timeout: float) -> bool:
        return self.until(f"{times} x {what}", lambda text: text.count(line) >= times, timeout)

    def end(self, timeout: float) -> int | None:
        """The follow's exit code (the run's, when it ended), or None if it still follows after `timeout`."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(timeout=10)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.end(timeout=30)

    def __enter__(self) -> LogWatch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def ended(watch_for: Callable[[], LogWatch], finished: Callable[[], dict[str, Any] | None],
          timeout: float, pause: float = 3.0) -> dict[str, Any] | None:
    """The run's record once it has ended: each follow that stops (the run's end, or a master that changed
    under it) is checked with one look at the record, and followed again if the run goes on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with watch_for() as watch:
            watch.end(timeout=max(1.0, deadline - time.monotonic()))
        if (record := finished()) is not None:
            return record
        time.sleep(pause)
    return None
