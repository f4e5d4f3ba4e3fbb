"""Labels every output line with the rank, the way `mpirun -l` would, but without splitting lines.

Intel MPI's -l labels each write it receives, and a line that reaches it in two reads comes out
broken in two. Labelling inside the rank keeps each line whole.
"""
from __future__ import annotations

import io
import sys
import threading
from typing import TextIO


class LabelledWriter(io.TextIOBase):
    """Each thread's unfinished line is kept apart: `print` writes its text and its newline in two calls,
    and a line another thread printed in between would otherwise land inside it (a notice event that
    the agent cannot parse)."""

    def __init__(self, target: TextIO, label: str) -> None:
        self.target = target
        self.label = label
        self.partial: dict[int, str] = {}
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        thread = threading.get_ident()
        with self.lock:
            lines = (self.partial.pop(thread, "") + text).split("\n")
            if rest := lines.pop():
                self.partial[thread] = rest
            if lines:
                self.target.write("".join(f"{self.label}{line}\n" for line in lines))
                self.target.flush()
        return len(text)

    def flush(self) -> None:
        with self.lock:
            if rest := self.partial.pop(threading.get_ident(), ""):
                self.target.write(f"{self.label}{rest}\n")
            self.target.flush()

    def close(self) -> None:
        with self.lock:
            self.target.write("".join(f"{self.label}{rest}\n" for rest in self.partial.values()))
            self.partial.clear()
            self.target.flush()
        super().close()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.target.fileno()


def label_streams(rank: int) -> None:
    sys.stdout = LabelledWriter(sys.stdout, f"[{rank}] ")
    sys.stderr = LabelledWriter(sys.stderr, f"[{rank}] ")
