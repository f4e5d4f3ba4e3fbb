"""One instance's container: an overlay "disk" over its image's layers, booted with
systemd-nspawn on the stand-in's bridge, its console captured to a file."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from xeoncluster.standin import cgroups

CONSOLE_TAIL = 64 * 1024  # EC2 returns the most recent 64 KiB of console output


@dataclass
class Container:
    name: str
    root: Path                 # the instance's directory: upper (its disk), work, merged, console
    lowers: tuple[Path, ...]   # image layers, topmost first
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def upper(self) -> Path:
        return self.root / "upper"

    @property
    def merged(self) -> Path:
        return self.root / "merged"

    @property
    def console(self) -> Path:
        return self.root / "console.log"

    @property
    def pid_file(self) -> Path:
        return self.root / "nspawn.pid"

    def create_disk(self) -> None:
        for sub in ("upper", "work", "merged"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def mount(self) -> None:
        lower = ":".join(str(p) for p in self.lowers)
        # index/redirect/metacopy off: a snapshot of `upper` must be usable as a plain lower layer.
        options = (f"lowerdir={lower},upperdir={self.upper},workdir={self.root / 'work'},"
                   "index=off,redirect_dir=off,metacopy=off")
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(self.merged)],
                       check=True, capture_output=True)

    def boot(self, bridge: str, cpu: int) -> int:
        """Start systemd-nspawn (in the caller's network namespace, where `bridge` is), confined to `cpu`."""
        with open(self.console, "ab") as console:
            # read-only: nspawn copies the container's /dev/console to its stdout without a tty.
            self.process = subprocess.Popen(cgroups.entering(self.name, [
                "systemd-nspawn", "-b", "--keep-unit", "--register=no", f"--network-bridge={bridge}",
                f"--cpu-affinity={cpu}",
                # The seed's resolv.conf (the VPC resolver) stays; nspawn would copy the host's.
                "--resolv-conf=off", "--console=read-only", "-D", str(self.merged), "--machine", self.name]),
                stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid_file.write_text(str(self.process.pid))
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def forget_neighbour(self, address: str) -> None:
        """Drop `address` from this container's ARP cache (it is the init's network namespace, a
        child of nspawn): EC2 hands a terminated instance's private address to a later one, and the
        VPC never answers with the old MAC, while a bridge's neighbours would for tens of seconds."""
        if not self.running() or self.process is None:
            return
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            init = children.read_text().split()[0]
        except (OSError, IndexError):
            return
        subprocess.run(["nsenter", "-t", init, "-n", "ip", "neigh", "flush", "to", address],
                       capture_output=True, check=False)

    def console_text(self) -> str:
        if not self.console.exists():
            return ""
        with open(self.console, "rb") as f:
            f.seek(max(0, self.console.stat().st_size - CONSOLE_TAIL))
            return f.read().decode(errors="replace")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM makes nspawn shut the container down cleanly; SIGKILL if it takes too long."""
        if self.process is not None:
            stop_process(self.process.pid, timeout, self.process)
        elif self.pid_file.exists():
            stop_process(int(self.pid_file.read_text()), timeout, None)
        self.pid_file.unlink(missing_ok=True)
        cgroups.kill(self.name)
        cgroups.remove(self.name)

    def unmount(self) -> None:
        unmount(self.merged)

    def halt(self) -> None:
        """Stop and unmount; the disk stays (as an EBS volume outlives its instance for a moment)."""
        self.stop()
        self.unmount()

    def remove(self) -> None:
        self.halt()
        remove_tree(self.root)


def remove_tree(path: Path) -> None:
    # rm is about twice as fast as shutil.rmtree on a venv's tens of thousands of files; never
    # cross into a mount (an overlay that failed to unmount).
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False)


def stop_process(pid: int, timeout: float, process: subprocess.Popen | None) -> None:
    if not _is_nspawn(pid) and (process is None or process.poll() is not None):
        return
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid, process):
        time.sleep(0.1)
    if _alive(pid, process):
        _signal(pid, signal.SIGKILL)
        if process is not None:
            process.wait(10)


def _alive(pid: int, process: subprocess.Popen | None) -> bool:
    if process is not None:
        return process.poll() is None
    return _is_nspawn(pid)


def _is_nspawn(pid: int) -> bool:
    # A pid from a file may have been reused: only ever signal a systemd-nspawn process.
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "systemd-nspawn"
    except OSError:
        return False


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def unmount(path: Path) -> None:
    if not is_mountpoint(path):
        return
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def is_mountpoint(path: Path) -> bool:
    return str(path) in mounts_under(path)


def mounts_under(prefix: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == str(prefix) or point.startswith(str(prefix).rstrip("/") + "/"):
            found.append(point)
    return found
