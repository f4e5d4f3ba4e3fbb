"""The per-command context: resolved config, state folder, provider, output and the SSH seam."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .config import ClusterConfig
from .progress import Reporter
from .providers.base import Provider
from .remote import FabricShell, NodeShell, SshIdentity
from .state import StateDir

VENV = "~/venv"


@dataclass
class Session:
    """Everything a command needs: the resolved config, its state folder, provider and output."""

    config: ClusterConfig
    state: StateDir
    provider: Provider
    reporter: Reporter
    shell_factory: Callable[[SshIdentity], NodeShell] = FabricShell

    def identity(self) -> SshIdentity:
        return SshIdentity(user=self.config.ssh.user or "root", key=self.state.key,
                           known_hosts=self.state.known_hosts, timeout=self.config.ssh.timeout)

    def shell(self) -> NodeShell:
        return self.shell_factory(self.identity())
