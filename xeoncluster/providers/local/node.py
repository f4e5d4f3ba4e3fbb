"""One local node's files and processes: its paths, sshd config and boot script, CPU share."""
from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.local import net

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class NodePaths:
    root: Path

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        return self.root / "sshd_config"

    @property
    def pid_file(self) -> Path:
        return self.root / "sshd.pid"

    @property
    def upper(self) -> Path:
        return self.root / "upper"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def hostname(self) -> Path:
        return self.root / "hostname"

    @property
    def meta(self) -> Path:
        return self.root / "node.json"


def remove_tree(path: Path) -> None:
    # rm -rf is several times faster than shutil.rmtree on a venv's tens of thousands of files.
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


def wait_for_port(host: str, port: int, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise ProviderError(f"sshd on {host} did not come back within {timeout:.0f}s")


def cpu_list(cpus_per_node: int | None, nodes: int, index: int) -> str | None:
    """CPUs for node `index`. Unset means an even share: nodes on one machine share its cores, and
    each node's topology probe must see only its share or every rank would claim every core."""
    total = len(os.sched_getaffinity(0))
    per_node = cpus_per_node or max(1, total // nodes)
    if per_node >= total:
        return None
    allowed = sorted(os.sched_getaffinity(0))
    first = (index * per_node) % total
    return ",".join(str(allowed[(first + i) % total]) for i in range(per_node))


def sshd_config(ip: str, paths: NodePaths) -> str:
    return "\n".join([
        f"ListenAddress {ip}",
        "Port 22",
        f"HostKey {paths.host_key}",
        f"PidFile {paths.pid_file}",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "AuthorizedKeysFile .ssh/authorized_keys",
        "Subsystem sftp internal-sftp",
        # MPI and parallel fan-out open many sessions at once.
        "MaxStartups 200:30:400",
        "MaxSessions 64",
        "LogLevel ERROR",
        "",
    ])


def node_boot_script(name: str, hosts: Path, paths: NodePaths, lower: Path) -> str:
    overlay = f"lowerdir={lower},upperdir={paths.upper},workdir={paths.work}"
    return " && ".join([
        f"hostname {name}",
        f"mount --bind {hosts} /etc/hosts",
        f"mount --bind {paths.hostname} /etc/hostname",
        f"mount -t overlay overlay -o {overlay} /root",
        f"exec {SSHD} -f {paths.sshd_config}",
    ])


def sshd_pid(paths: NodePaths) -> int | None:
    try:
        pid = int(paths.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if net._alive(pid) else None


def is_sshd(cmdline: str) -> bool:
    """sshd's command line, also as OpenSSH >= 9.8 retitles its listener (`sshd: /usr/sbin/sshd -f ... [listener]`)."""
    return cmdline.startswith((SSHD, f"sshd: {SSHD} "))


def sshd_processes() -> Iterator[tuple[int, str]]:
    """(pid, command line) of every sshd on this machine, in any namespace."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if is_sshd(cmdline):
            yield int(proc.name), cmdline


def stray_sshd_pids(cluster_dir: Path) -> list[int]:
    """sshd daemons whose config lives under this cluster's folder, even if their namespace is gone."""
    needle = str(cluster_dir) + "/"
    return [pid for pid, cmdline in sshd_processes() if needle in cmdline]
