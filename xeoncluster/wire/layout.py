"""Where things live on a node, relative to the login user's home. Defined once for every module.

Intel MPI starts remote proxies from the same absolute path, so the venv sits at the same place
on every node; paths here are relative to the home and made absolute with `RemoteLayout.at(home)`.
"""
from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class RunFolder:
    """One run's folder on the agent's host; runs/record.py says what each file holds."""

    path: str
    RECORD = "run.json"
    REQUEST = "request.json"
    ENV = "env"
    LAUNCH = "launch.json"
    LOG = "train.log"
    EVENTS = "events.jsonl"
    AGENT_LOG = "agent.log"
    CANCEL = "cancel"
    USAGE = "usage.jsonl"
    STACKS = "stacks"
    TENSORBOARD = "tensorboard"

    def file(self, name: str) -> str:
        return f"{self.path}/{name}"


@dataclass(frozen=True)
class AgentLayout:
    """Every folder of the agent's home (its XEONCLUSTER_HOME on its host)."""

    home: str

    def cluster(self, cluster: str) -> str:
        return f"{self.home}/clusters/{cluster}"

    def runs(self, cluster: str) -> str:
        return f"{self.cluster(cluster)}/runs"

    def run(self, cluster: str, run: str) -> RunFolder:
        return RunFolder(f"{self.runs(cluster)}/{run}")
