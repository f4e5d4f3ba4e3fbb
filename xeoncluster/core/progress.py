"""Progress for long steps: a rich spinner on a terminal, plain timestamped lines otherwise.

Everything shown is also appended to the command's log in the state folder.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.status import Status


class Reporter:
    def __init__(self, stream: TextIO | None = None, log_path: Path | None = None, fancy: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.fancy = self.stream.isatty() if fancy is None else fancy
        self.console = Console(file=self.stream, highlight=False) if self.fancy else None
        self.log_path = log_path
        self._status: Status | None = None
        self._label = ""
        # Messages quote what nodes and the provider said (an SSH error, a tag); the CLI sets its door
        # for terminal text here (runs/display.py), which this floor cannot import.
        self.shown: Callable[[str], str] = str

    def attach_log(self, path: Path) -> None:
        self.log_path = path

    def log(self, text: str) -> None:
        if self.log_path is None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as handle:
            handle.write(f"{time.strftime('%H:%M:%S')} {text.rstrip()}\n")

    def info(self, message: str) -> None:
        message = self.shown(message)
        self._say(message, f"  {message}", f"{message}\n", markup=False)

    def warn(self, message: str) -> None:
        message = self.shown(message)
        # Warnings quote values read from the cluster: their brackets are text, not markup.
        self._say(f"WARNING {message}", f"[yellow]  warning:[/] {escape(message)}", f"warning: {message}\n",
                  markup=True)

    def _say(self, logged: str, styled: str, plain: str, markup: bool) -> None:
        """One line to the log, and to the console styled or to a plain stream as it is."""
        self.log(logged)
        if self.console is not None:
            self.console.print(styled, markup=markup)
        else:
            self.stream.write(plain)
            self.stream.flush()

    def detail(self, message: str) -> None:
        """Progress within the current step: updates the spinner, or prints a plain line."""
        message = self.shown(message)
        self.log(f"  {message}")
        if self._status is not None:
            self._status.update(f"{self._label}: {escape(message)}")
        elif self.console is None:
            self.stream.write(f"    {message}\n")
            self.stream.flush()

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        start = time.monotonic()
        self.log(f"==> {label}")
        self._label = label
        if self.console is not None:
            self._status = self.console.status(label)
            self._status.start()
        else:
            self.stream.write(f"==> {label}\n")
            self.stream.flush()
        ok = False
        try:
            yield
            ok = True
        finally:
            if self._status is not None:
                self._status.stop()
                self._status = None
            elapsed = time.monotonic() - start
            self.log(f"<== {label}: {'ok' if ok else 'FAILED'} ({elapsed:.1f}s)")
            self._finish(label, ok, elapsed)

    def _finish(self, label: str, ok: bool, elapsed: float) -> None:
        if self.console is not None:
            mark = "[green]✓[/]" if ok else "[red]✗[/]"
            self.console.print(f"{mark} {label} [dim]({elapsed:.1f}s)[/]")
        elif ok:
            self.stream.write(f"    done ({elapsed:.1f}s)\n")
            self.stream.flush()
