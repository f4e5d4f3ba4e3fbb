"""One hierarchy for every error the CLI turns into a one-line message.

The same concept as node/startup/errors.py on the other side of the wire: that one is the ranks',
which import nothing outside node/."""
from __future__ import annotations

from pathlib import Path


class XeonClusterError(Exception):
    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, log: Path | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.log = log

    def one_line(self) -> str:
        parts = [self.message]
        if self.log is not None:
            parts.append(f"log: {self.log}")
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return " | ".join(parts)


class ConfigError(XeonClusterError):
    """Bad input: usage, config, or a preflight check. Nothing was created."""

    exit_code = 2


class ProviderError(XeonClusterError):
    pass


class RemoteError(XeonClusterError):
    pass


class TrainingError(XeonClusterError):
    pass


class BusyError(XeonClusterError):
    """Another command holds the cluster's lock."""


class NoStateError(XeonClusterError):
    """No readable state for a cluster, no provider named, and no local leftovers of it."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no state for {name} on this machine; pass --provider aws to search AWS by tag")
        self.name = name
