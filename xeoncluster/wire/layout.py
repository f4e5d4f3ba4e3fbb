"""Where things live on a node, relative to the login user's home. Defined once for every module.

Intel MPI starts remote proxies from the same absolute path, so the venv sits at the same place
on every node; paths here are relative to the home and made absolute with `RemoteLayout.at(home)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

VENV = "venv"
PACKAGE_ROOT = "xeoncluster"
# The one entry of the ranks' PYTHONPATH: it holds the `xeoncluster` package (its node code) and
# nothing else, so a user's own modules of any name are never shadowed.
NODE_LIB = f"{PACKAGE_ROOT}/lib"
NODE_MODULE = "xeoncluster.node"
MASTER_KEY = ".ssh/id_ed25519"
SSH_CONFIG = ".ssh/config"
KNOWN_HOSTS = ".ssh/known_hosts"
HOSTFILE = "hosts"


def home_relative(path: str) -> str:
    """`~/path`, the form a remote shell expands."""
    return f"~/{path}"


@dataclass(frozen=True)
class RemoteLayout:
    """Absolute paths on a node whose login home is `home`."""

    home: str

    def path(self, relative: str) -> str:
        return f"{self.home}/{relative}"

    @property
    def python(self) -> str:
        return self.path(f"{VENV}/bin/python")

    @property
    def mpiexec(self) -> str:
        # Not `mpirun`: it finds mpiexec.hydra through PATH, and Debian's MPICH may come first.
        return self.path(f"{VENV}/bin/mpiexec.hydra")

    @property
    def hostfile(self) -> str:
        return self.path(HOSTFILE)

    @property
    def package_root(self) -> str:
        return self.path(PACKAGE_ROOT)

    @property
    def node_lib(self) -> str:
        return self.path(NODE_LIB)

    def run_dir(self, run: str) -> str:
        return self.path(f"{PACKAGE_ROOT}/runs/{run}")


# The agent's side of a cluster, on the host it lives on (the master on a cloud, this machine for local
# nodes), relative to the login home on the master. Both the CLI (runs/) and the agent use these.
AGENT_HOME = f"{PACKAGE_ROOT}/agent"
# The xeoncluster package (its agent and what it reads) on the master, one folder per content digest:
# installing a newer one never pulls the code from under an agent still at work on a run.
APP = f"{PACKAGE_ROOT}/app"
VERSION_FILE = f"{AGENT_HOME}/version.json"


# A run's folder as the laptop names it (text, for commands run on the agent's host) or as the agent
# opens it (a Path on its own host): one description of the folder serves both.
Where = TypeVar("Where", str, Path)


@dataclass(frozen=True)
class RunFolder(Generic[Where]):
    """One run's folder on the agent's host; runs/record.py says what each file holds."""

    path: Where
    RECORD: ClassVar[str] = "run.json"
    REQUEST: ClassVar[str] = "request.json"
    ENV: ClassVar[str] = "env"
    LAUNCH: ClassVar[str] = "launch.json"
    LOG: ClassVar[str] = "train.log"
    EVENTS: ClassVar[str] = "events.jsonl"
    AGENT_LOG: ClassVar[str] = "agent.log"
    CANCEL: ClassVar[str] = "cancel"
    USAGE: ClassVar[str] = "usage.jsonl"
    STACKS: ClassVar[str] = "stacks"
    TENSORBOARD: ClassVar[str] = "tensorboard"

    def file(self, name: str) -> Where:
        if isinstance(self.path, Path):
            return self.path / name
        return f"{self.path}/{name}"

    @property
    def record(self) -> Where:
        return self.file(self.RECORD)

    @property
    def request(self) -> Where:
        return self.file(self.REQUEST)

    @property
    def env(self) -> Where:
        return self.file(self.ENV)

    @property
    def launch(self) -> Where:
        return self.file(self.LAUNCH)

    @property
    def log(self) -> Where:
        return self.file(self.LOG)

    @property
    def events(self) -> Where:
        return self.file(self.EVENTS)

    @property
    def agent_log(self) -> Where:
        return self.file(self.AGENT_LOG)

    @property
    def cancel(self) -> Where:
        return self.file(self.CANCEL)

    @property
    def usage(self) -> Where:
        return self.file(self.USAGE)

    @property
    def stacks(self) -> Where:
        return self.file(self.STACKS)

    @property
    def tensorboard(self) -> Where:
        return self.file(self.TENSORBOARD)


@dataclass(frozen=True)
class AgentLayout:
    """Every folder of the agent's home (its XEONCLUSTER_HOME on its host)."""

    home: str

    def cluster(self, cluster: str) -> str:
        return f"{self.home}/clusters/{cluster}"

    def runs(self, cluster: str) -> str:
        return f"{self.cluster(cluster)}/runs"

    def run(self, cluster: str, run: str) -> RunFolder[str]:
        return RunFolder(f"{self.runs(cluster)}/{run}")
