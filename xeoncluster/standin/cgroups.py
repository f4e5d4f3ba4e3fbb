"""A cgroup of its own for each container.

`systemd-nspawn --keep-unit` puts its container in `payload` under the caller's cgroup. Every
container the daemon starts would share that one tree, and each container's systemd manages it as
its own: every instance's sshd children sat in one `system.slice/ssh.service`, and a run agent's
transient unit had the same path on an old and a new master, so one instance stopping a unit could
reach another's processes. On EC2 an instance that goes away never touches another's."""
from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
HIERARCHIES = ("systemd", "unified")  # cgroup v1 hybrid: name=systemd and the cgroup2 tree
GROUP = "xeoncluster-standin"


def group_dirs(name: str, root: Path = ROOT) -> list[Path]:
    """The instance's cgroup in each hierarchy this machine mounts."""
    mounted = [root / h for h in HIERARCHIES if (root / h / "cgroup.procs").exists()]
    if not mounted and (root / "cgroup.procs").exists() and (root / "cgroup.controllers").exists():
        mounted = [root]  # a pure cgroup2 machine
    return [base / GROUP / name for base in mounted]


def entering(name: str, command: list[str], root: Path = ROOT) -> list[str]:
    """`command`, started from a shell that first moves itself into the instance's cgroups (made
    here); the shell then execs, so the pid is the command's. A preexec_fn would do the same, but it
    is not safe in the daemon, which runs threads."""
    targets = []
    for group in group_dirs(name, root):
        group.mkdir(parents=True, exist_ok=True)
        targets.append(shlex.quote(str(group / "cgroup.procs")))
    if not targets:
        return command
    script = f'for g in {" ".join(targets)}; do echo $$ > "$g" || exit 125; done; exec "$@"'
    return ["sh", "-c", script, "sh", *command]


def kill(name: str, root: Path = ROOT, timeout: float = 10.0) -> None:
    """End every process left in the instance's cgroups. A container whose nspawn was SIGKILLed
    after its shutdown overran keeps running without it (its init finishes the shutdown: 90 s more of
    a master's mpiexec on the network), where a machine that is terminated is gone."""
    for group in group_dirs(name, root):
        switch = group / "cgroup.kill"
        if switch.exists():
            with contextlib.suppress(OSError):
                switch.write_text("1")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_populated(group) for group in group_dirs(name, root)):
        time.sleep(0.1)


def _populated(group: Path) -> bool:
    for here, _, files in os.walk(group):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError):
                if (Path(here) / "cgroup.procs").read_text().strip():
                    return True
    return False


def remove(name: str, root: Path = ROOT) -> None:
    """Remove the instance's cgroups once nothing runs in them (a busy one stays: rmdir refuses)."""
    for group in group_dirs(name, root):
        if not group.is_dir():
            continue
        for here, subdirs, _ in os.walk(group, topdown=False):
            for sub in subdirs:
                _rmdir(Path(here) / sub)
        _rmdir(group)
        _rmdir(group.parent)  # the last instance's takes the shared parent with it


def leftovers(names: list[str], root: Path = ROOT) -> list[Path]:
    return [group for name in names for group in group_dirs(name, root) if group.exists()]


def _rmdir(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()
