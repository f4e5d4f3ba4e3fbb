"""Which ranks one server may fork: the same user, network namespace, CPU set, interpreter, package and
import-time environment as the rank that started it."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from xeoncluster.node.warm_start.socket_folder import for_home

MODULE = "xeoncluster.node.warm_start"  # the server's: `python -m MODULE ADDRESS`
# Values that differ between launches and runs but that nothing reads while importing: the launcher's
# (MPI's, its ssh session's), the rank's place in the job, and the run's own (XC_*, trackers). Any other
# difference (threads, LD_PRELOAD, caches, offline switches, --env values) needs a server of its own.
PER_LAUNCH_PREFIXES = ("PMI_", "MPI_", "MPIR_", "HYDRA_", "HYDI_", "I_MPI_", "XC_", "MASTER_", "SSH_",
                       "WANDB_", "TENSORBOARD_", "TORCHELASTIC_", "XDG_SESSION_")
PER_LAUNCH_NAMES = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                              "LOCAL_WORLD_SIZE", "GROUP_RANK", "GLOO_SOCKET_IFNAME"})


def per_launch(name: str) -> bool:
    return name in PER_LAUNCH_NAMES or name.startswith(PER_LAUNCH_PREFIXES)


def import_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of a rank's environment its imports may read: what a server is started with."""
    return {name: value for name, value in environ.items() if not per_launch(name)}


def package_stamp() -> list[tuple[str, int, int]]:
    """The training package's files as imported: a package synced anew needs a new server."""
    root = Path(__file__).resolve().parents[2]
    stamp = []
    for path in sorted(root.rglob("*.py")):
        info = path.stat()
        stamp.append((str(path.relative_to(root)), info.st_mtime_ns, info.st_size))
    return stamp


def fingerprint(environ: Mapping[str, str]) -> str:
    # Not sys.path: it follows from PYTHONPATH, and its entries relative to the working folder differ between
    # a server (started in /) and its ranks; a forked rank takes its own.
    text = json.dumps([sys.executable, sorted(import_env(environ).items()), package_stamp()])
    return hashlib.sha256(text.encode()).hexdigest()


def cpu_set_prefix(cpus: set[int] | None = None) -> str:
    """The start of the socket names of this user's servers for this network namespace and CPU set. The
    namespace is in the name because each node (a machine, a container, a local namespace node) has its own
    servers, and a socket file can be reached from any namespace that sees the folder. The CPU set is in it
    because OpenMP fixes its thread places from it when torch loads: one server per set, so per local rank."""
    cpus = os.sched_getaffinity(0) if cpus is None else cpus
    digest = hashlib.sha256(",".join(map(str, sorted(cpus))).encode()).hexdigest()[:12]
    return f"{os.stat('/proc/self/ns/net').st_ino}-{digest}-"


def address(environ_fingerprint: str, user_home: Path, cpus: set[int] | None = None) -> Path:
    """The server's socket file, in the folder only this user may enter (socket_folder.py)."""
    name = cpu_set_prefix(cpus) + environ_fingerprint[:16]
    return for_home(user_home, len(name)) / name
