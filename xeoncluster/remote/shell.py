"""What the lifecycle asks of SSH to nodes (NodeShell), and what it gets back.

This is the one seam between the lifecycle and the nodes: remote/fabric_shell.py implements it with
pinned host keys and parallel fan-out, and tests of the AWS lifecycle replace it with a recording
stand-in, because moto's addresses must never be dialled. Fabric and paramiko are imported there only:
they are a fifth of the imports of a CLI call, most of which dial no node.
"""
from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from xeoncluster.providers.base import Node


@dataclass(frozen=True)
class SshIdentity:
    user: str
    key: Path
    known_hosts: Path
    timeout: int = 300
    port: int = 22


@dataclass(frozen=True)
class RemoteFile:
    """A small file to write on a node; `path` is relative to the login home unless absolute."""

    path: str
    text: str
    mode: int = 0o644


@dataclass(frozen=True)
class CommandResult:
    node: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def last_line(self) -> str:
        lines = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return lines[-1] if lines else f"exit {self.exit_code}"


class NodeShell(Protocol):
    """What the lifecycle needs from SSH."""

    def wait_ready(self, nodes: list[Node], timeout: float) -> None: ...

    def wait_login(self, nodes: list[Node], timeout: float, progress: Callable[[str], None]) -> None: ...

    def scan_host_key(self, node: Node) -> str: ...

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]: ...

    def stream(self, nodes: list[Node], command: str, sink: Callable[[str, str], None]) -> dict[str, CommandResult]: ...

    def put_files(self, node: Node, files: list[RemoteFile]) -> None: ...

    def put(self, node: Node, local: Path, remote_path: str) -> None: ...

    def get(self, node: Node, remote_path: str, local: Path) -> None: ...

    def close(self) -> None: ...


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
