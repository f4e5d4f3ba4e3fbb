"""Where a cluster's run agent lives, and how the CLI reaches its files and starts it.

On a cloud the agent runs on the master, as a systemd unit the SSH session does not own: a closed
laptop does not end it. For nodes that are namespaces on this machine the agent is a detached
process here, which reaches every node as the CLI does. Either way the CLI talks to the host
through shell commands, so `train`, `runs`, `logs` and `cancel` have one code path.
"""
from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from typing import Protocol

from xeoncluster.core.errors import RemoteError
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import CommandResult, NodeShell, RemoteFile
from xeoncluster.wire.contract import AGENT_MODULE, VERSION
from xeoncluster.wire.layout import AGENT_HOME, APP, VENV


class AgentHost(Protocol):
    @property
    def name(self) -> str:
        """For messages: "node0 (master)" or "this machine"."""

    @property
    def home(self) -> str:
        """The agent's XEONCLUSTER_HOME on that host."""

    @property
    def agent_version(self) -> int:
        """The contract version of the agent installed there (contract.py)."""

    def run(self, command: str) -> CommandResult: ...

    def write(self, path: str, text: str, mode: int = 0o644) -> None: ...

    def start(self, unit: str, args: list[str], log: str) -> None:
        """Start `python -m xeoncluster.agent ARGS` detached from this session, output to `log`."""

    def call(self, args: list[str]) -> CommandResult:
        """Run `python -m xeoncluster.agent ARGS` to its end, as the agents run."""


def agent_command(python: str, args: list[str]) -> str:
    return shlex.join([python, "-m", AGENT_MODULE, *args])


@dataclass
class LocalHost:
    """This machine: the agent runs beside the CLI, with the same home and the same package."""

    home: str
    python: str
    name: str = "this machine"
    agent_version: int = VERSION  # the agent runs from this very package

    def run(self, command: str) -> CommandResult:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, errors="replace")
        return CommandResult(self.name, done.returncode, done.stdout, done.stderr)

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        from pathlib import Path

        from xeoncluster.cluster.state import atomic_write

        atomic_write(Path(path), text, mode)

    def start(self, unit: str, args: list[str], log: str) -> None:
        command = (f"mkdir -p {shlex.quote(log.rsplit('/', 1)[0])} && XEONCLUSTER_HOME={shlex.quote(self.home)} "
                   f"setsid -f {agent_command(self.python, args)} </dev/null >>{shlex.quote(log)} 2>&1")
        result = self.run(command)
        if not result.ok:
            raise RemoteError(f"could not start the run agent on {self.name}: {result.last_line()}")

    def call(self, args: list[str]) -> CommandResult:
        return self.run(f"XEONCLUSTER_HOME={shlex.quote(self.home)} {agent_command(self.python, args)}")


@dataclass
class MasterHost:
    """node0 of a cloud cluster, reached over SSH; the agent runs from the venv with the synced package."""

    shell: NodeShell
    master: Node
    home_dir: str  # the login home on the master, e.g. /home/ubuntu
    name: str = "node0 (master)"
    app: str = ""  # the digest of this CLI's agent code (APP/DIGEST), which the agents it starts run
    inherit: tuple[str, ...] = ()  # the master's own variables its agents keep (the provider's agent_env)
    agent_version: int = VERSION   # what the installed agent says it is (version.json)

    @property
    def home(self) -> str:
        return f"{self.home_dir}/{AGENT_HOME}"

    def run(self, command: str) -> CommandResult:
        return self.shell.run([self.master], command)[self.master.name]

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        self.shell.put_files(self.master, [RemoteFile(path, text, mode)])

    @property
    def _env(self) -> dict[str, str]:
        return {"XEONCLUSTER_HOME": self.home, "PYTHONPATH": f"{self.home_dir}/{APP}/{self.app}"}

    @property
    def _python(self) -> str:
        return f"{self.home_dir}/{VENV}/bin/python"

    @property
    def _variables(self) -> str:
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in self._env.items())

    def call(self, args: list[str]) -> CommandResult:
        return self.run(f"{self._variables} {agent_command(self._python, args)}")

    def start(self, unit: str, args: list[str], log: str) -> None:
        """A transient systemd unit of the login user; where there is no systemd, a detached process."""
        env = self._env
        command = agent_command(self._python, args)
        user = "$(id -un)"
        setenv = " ".join(f"--setenv={k}={shlex.quote(v)}" for k, v in env.items())
        setenv += "".join(f' ${{{name}:+"--setenv={name}=${name}"}}' for name in self.inherit
                          if re.fullmatch(r"[A-Z][A-Z0-9_]*", name))
        systemd = (f"sudo -n systemd-run --quiet --collect --unit={shlex.quote(unit)} --uid={user} --gid=$(id -gn) "
                   f"{setenv} --working-directory={shlex.quote(self.home_dir)} "
                   f"--property=StandardOutput=append:{shlex.quote(log)} "
                   f"--property=StandardError=append:{shlex.quote(log)} {command}")
        detached = f"{self._variables} setsid -f {command} </dev/null >>{shlex.quote(log)} 2>&1"
        script = (f"mkdir -p {shlex.quote(log.rsplit('/', 1)[0])} && "
                  f"if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null; then {systemd}; "
                  f"else {detached}; fi")
        result = self.run(script)
        if not result.ok:
            raise RemoteError(f"could not start the run agent on {self.name}: {result.last_line()}")
