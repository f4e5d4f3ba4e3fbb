"""The per-command context: the resolved config, the state folder, the provider, output, SSH.

Config resolution lives here so that every command follows one rule: `up` and `plan` describe a
cluster to create, so they read the config file and flags; every other command targets an existing
cluster and uses the config it was created with (flags still win), so `--name` is enough.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xeoncluster.cluster.removals import find_removal
from xeoncluster.cluster.state import ClusterRecord, StateDir, xeoncluster_home
from xeoncluster.cluster.state_refresh import refresh
from xeoncluster.core.errors import NoStateError, XeonClusterError
from xeoncluster.core.progress import Reporter
from xeoncluster.providers.base import Provider
from xeoncluster.providers.config import ClusterConfig, default_config_path, load_config, read_yaml
from xeoncluster.providers.factory import locate_without_state, make_provider
from xeoncluster.remote.shell import NodeShell, SshIdentity

ProviderFactory = Callable[[ClusterConfig, Callable[[str], None]], Provider]
ShellFactory = Callable[[SshIdentity], NodeShell]
TARGET_KEYS = ("name", "provider", "region", "profile")


def fabric_shell(identity: SshIdentity) -> NodeShell:
    """SSH through Fabric, imported when a command first dials a node (remote/shell.py says why)."""
    from xeoncluster.remote.fabric_shell import FabricShell

    return FabricShell(identity)


@dataclass
class CommandContext:
    """Everything a command needs: the resolved config, its state folder, provider and output."""

    config: ClusterConfig
    state: StateDir
    provider: Provider
    reporter: Reporter
    shell_factory: ShellFactory = fabric_shell

    def identity(self) -> SshIdentity:
        return SshIdentity(user=self.config.ssh.user or "root", key=self.state.key,
                           known_hosts=self.state.known_hosts, timeout=self.config.ssh.timeout)

    def shell(self) -> NodeShell:
        return self.shell_factory(self.identity())

    def require_up(self, *, ready: bool = True) -> ClusterRecord:
        """The cluster's record, or one error saying it is not up. `ready=False` also accepts a
        cluster kept after a failed `up` (--keep-on-failure), which is there to be inspected."""
        record = self.state.load()
        if record is None or not record.nodes or (ready and not record.ready):
            raise XeonClusterError(f"cluster '{self.config.name}' is not up",
                                   hint=f"run `xeoncluster up --name {self.config.name}` first")
        return refresh(self, record)  # the agent's changes (replaced nodes) come back here first


def resolve_config(options: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                   creating: bool = False, locate: bool = False) -> ClusterConfig:
    """`options`: the global and command options (config_path, name, provider, region, profile).

    `locate` (down, status): without readable state and without a provider named by --provider or
    the config file, the cluster is looked for among this machine's local leftovers, never on AWS
    by default (that needs credentials and is rarely what was meant); NoStateError if none."""
    xeoncluster_home()  # a bad XEONCLUSTER_HOME is bad input, not a missing state file
    merged = {k: v for k, v in options.items() if v is not None}
    path: Path | None = merged.pop("config_path", None) or default_config_path()
    values = {key: merged.get(key) for key in TARGET_KEYS} | dict(overrides or {})
    config = load_config(path, values)
    if creating:
        # `up` on a cluster that is up grows or repairs it: it keeps its config, and only flags change it.
        return recorded_config(config.name, values, ready_only=True) or config
    recorded = recorded_config(config.name, values) or removed_config(config.name, values)
    if recorded is not None or not locate or _provider_named(path, values):
        return recorded or config
    found = locate_without_state(config)
    if found is None:
        raise NoStateError(config.name)
    return load_config(path, {**values, **found})


def _provider_named(path: Path | None, values: Mapping[str, Any]) -> bool:
    return values.get("provider") is not None or (path is not None and "provider" in read_yaml(path))


def removed_config(name: str, overrides: Mapping[str, Any]) -> ClusterConfig | None:
    """A cluster this machine saw removed keeps its config (its runs' storage is there), unless
    --provider names another."""
    removal = find_removal(name)
    if removal is None or not removal.config or overrides.get("provider") not in (None, removal.provider):
        return None
    return load_config(None, {**removal.config, **{k: v for k, v in overrides.items() if v is not None}})


def recorded_config(name: str, overrides: Mapping[str, Any], ready_only: bool = False) -> ClusterConfig | None:
    try:
        record = StateDir(name).load()
    except XeonClusterError:
        return None  # a corrupt state file must not stop `down`
    if record is None or (ready_only and not record.ready):
        return None
    return load_config(None, {**record.config, **{k: v for k, v in overrides.items() if v is not None}})


def make_context(config: ClusterConfig, provider_factory: ProviderFactory | None = None,
                 shell_factory: ShellFactory | None = None) -> CommandContext:
    reporter = Reporter()
    provider = (provider_factory or make_provider)(config, reporter.info)
    return CommandContext(config=config, state=StateDir(config.name), provider=provider, reporter=reporter,
                          shell_factory=shell_factory or fabric_shell)
