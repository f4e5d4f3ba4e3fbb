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
    def __init__(self, target: TextIO, label: str) -> None:
        self.target = target
        self.label = label
        self.partial = ""
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            lines = (self.partial + text).split("\n")
            self.partial = lines.pop()
            if lines:
                self.target.write("".join(f"{self.label}{line}\n" for line in lines))
                self.target.flush()
        return len(text)

    def flush(self) -> None:
        with self.lock:
            if self.partial:
                self.target.write(f"{self.label}{self.partial}\n")
                self.partial = ""
            self.target.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.target.fileno()


def label_streams(rank: int) -> None:
    sys.stdout = LabelledWriter(sys.stdout, f"[{rank}] ")
    sys.stderr = LabelledWriter(sys.stderr, f"[{rank}] ")
