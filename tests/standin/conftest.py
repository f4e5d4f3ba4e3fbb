"""Fixtures for the stand-in tests: one stand-in per module (its own namespace and dirs, the
shared caches), the test process moved into its namespace, and one booted node to share.

Real containers, no mocks. Skipped unless root with systemd-nspawn, mmdebstrap and nsenter."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from xeoncluster.standin.containers import mounts_under
from xeoncluster.standin.network import current_netns_inode, enter_netns, return_to
from xeoncluster.standin.paths import Paths

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "aws-standin.sh"
TEST_PATHS = Paths(Path("/run/xeoncluster-standin-test"), Path("/var/lib/xeoncluster-standin-test"),
                   Path("/var/cache/xeoncluster-standin"), "xcstandin-t", "xcbr-t")
SCALE = 100  # boot 20 s -> 0.2 s, AMI 120 s -> 1.2 s


@dataclass
class Standin:
    paths: Paths
    netns_inode: int
    timings: dict[str, float] = field(default_factory=dict)

    def script(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], env={**os.environ, **self.paths.env()}, check=check,
                              capture_output=True, text=True, timeout=600)

    def leftovers(self) -> list[str]:
        found = [f"mount {m}" for m in mounts_under(self.paths.lib)]
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        found += [f"namespace {self.paths.netns}"] if self.paths.netns in netns.split() else []
        bridges = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True).stdout
        found += [f"bridge {self.paths.bridge}"] if f" {self.paths.bridge}:" in bridges else []
        nspawn = subprocess.run(["pgrep", "-a", "systemd-nspawn"], capture_output=True, text=True).stdout
        found += [f"process {line}" for line in nspawn.splitlines() if str(self.paths.lib) in line]
        found += [f"dir {d}" for d in (self.paths.lib, self.paths.run) if d.exists()]
        return found


@pytest.fixture(scope="module")
def standin() -> Iterator[Standin]:
    stand = Standin(TEST_PATHS, 0)
    stand.script("stop")
    started = time.monotonic()
    stand.script("start", "--scale", str(SCALE))
    stand.timings["start"] = time.monotonic() - started
    previous = enter_netns(Path("/run/netns") / TEST_PATHS.netns)
    stand.netns_inode = current_netns_inode()
    try:
        with pytest.MonkeyPatch.context() as mp:
            _aws_env(mp)
            _namespace_only(mp, stand.netns_inode)
            yield stand
    finally:
        return_to(previous)
        stand.script("stop", check=False)
        print("\nstand-in timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in stand.timings.items()))
        assert stand.leftovers() == []


def _aws_env(mp: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        mp.delenv(name, raising=False)
    mp.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    mp.setenv("AWS_ACCESS_KEY_ID", "testing")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    mp.setenv("AWS_REGION", "us-east-1")
    mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _namespace_only(mp: pytest.MonkeyPatch, inode: int) -> None:
    """Like tests/aws's loopback guard: no connection unless this thread is in the stand-in's
    namespace (which has no default route), so an address moto hands out cannot leave the machine."""
    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and current_netns_inode() != inode:
            raise AssertionError(f"connection to {address} outside the stand-in's namespace")
        return real_connect(sock, address)

    mp.setattr(socket.socket, "connect", connect)


@dataclass(frozen=True)
class KeyPair:
    name: str
    private: Path
    public: str


@pytest.fixture(scope="module")
def key_pair(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    import boto3

    folder = tmp_path_factory.mktemp("standin-key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "id")], check=True)
    public = (folder / "id.pub").read_text().strip()
    boto3.client("ec2").import_key_pair(KeyName="standin-test", PublicKeyMaterial=public.encode())
    return KeyPair("standin-test", folder / "id", public)
