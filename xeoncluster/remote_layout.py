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
NODE_MODULES = (NODE_MODULE, "training")  # `training`: how agents before 0.2 launched it
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
