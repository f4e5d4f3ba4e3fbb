"""Which ranks one server may fork: the same user, network namespace, CPU set, interpreter, package and
import-time environment as the rank that started it."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

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
    """The start of the abstract socket names of this user's servers for this CPU set. Abstract names live
    in the network namespace, so each node (a machine, a container, a local namespace node) has its own.
    The CPU set is in the name because OpenMP fixes its thread places from it when torch loads: one server
    per set, so per local rank."""
    cpus = os.sched_getaffinity(0) if cpus is None else cpus
    digest = hashlib.sha256(",".join(map(str, sorted(cpus))).encode()).hexdigest()[:12]
    return f"xeoncluster-warm-{os.getuid()}-{digest}-"


def address(environ_fingerprint: str, cpus: set[int] | None = None) -> str:
    return cpu_set_prefix(cpus) + environ_fingerprint[:16]


def listening(prefix: str) -> list[str]:
    """The abstract socket names in this network namespace that start with `prefix`."""
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    names = {fields[-1][1:] for fields in map(str.split, lines) if len(fields) >= 8 and fields[-1].startswith("@")}
    return sorted(name for name in names if name.startswith(prefix))
