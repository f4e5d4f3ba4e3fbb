"""The stand-in's network: one namespace holding loopback and one bridge with moto's default VPC
range, the gateway address and the IMDS address. It has no default route, so an address moto
hands out is either one of our containers or unreachable."""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class Network:
    netns: str
    bridge: str
    gateway: str = "172.31.0.1"
    vpc_cidr: str = "172.31.0.0/16"
    imds: str = "169.254.169.254"
    dns: str = "172.31.0.2"  # AmazonProvidedDNS: the VPC's base address + 2

    @property
    def prefixlen(self) -> int:
        return int(self.vpc_cidr.split("/")[1])

    @property
    def netns_path(self) -> Path:
        return Path("/run/netns") / self.netns

    def exists(self) -> bool:
        return self.netns_path.exists()

    @property
    def bridge_mac(self) -> str:
        """A fixed, locally administered address for the bridge (the VPC router, resolver and IMDS live on
        it). Left unset, a Linux bridge takes the lowest of its ports' addresses and changes it as containers
        come and go, while each container keeps the old one in its neighbour cache: its queries to the resolver
        then went to another container, unanswered, for two 5 s resolver timeouts (docs/spot.md). EC2's do not move."""
        digest = hashlib.sha256(self.bridge.encode()).digest()[:5]
        return ":".join(f"{b:02x}" for b in (0x02, *digest))

    def create(self) -> None:
        _ip("netns", "add", self.netns)
        self.ip("link", "set", "lo", "up")
        self.ip("link", "add", self.bridge, "address", self.bridge_mac, "type", "bridge")
        self.ip("addr", "add", f"{self.gateway}/{self.prefixlen}", "dev", self.bridge)
        self.ip("addr", "add", f"{self.imds}/32", "dev", self.bridge)
        self.ip("addr", "add", f"{self.dns}/32", "dev", self.bridge)
        self.ip("link", "set", self.bridge, "up")

    def destroy(self) -> None:
        if self.exists():
            _ip("netns", "del", self.netns)

    def route_public(self, address: str) -> None:
        # Public IPs are extra addresses on the container's host0; a /32 on the bridge reaches them.
        self.ip("route", "replace", f"{address}/32", "dev", self.bridge)

    def unroute_public(self, address: str) -> None:
        self.ip("route", "del", f"{address}/32", "dev", self.bridge, check=False)

    def has_default_route(self) -> bool:
        out = subprocess.run(["ip", "-n", self.netns, "route", "show", "default"], capture_output=True, text=True)
        return bool(out.stdout.strip())

    def ip(self, *args: str, check: bool = True) -> None:
        _ip("-n", self.netns, *args, check=check)

    def nsenter_prefix(self) -> list[str]:
        # Only the network namespace: mounts stay in the host's mount namespace, where `stop` and
        # the tests can see (and remove) them.
        return ["nsenter", f"--net={self.netns_path}", "--"]


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


def enter_netns(path: Path) -> int:
    """Move the calling thread into the namespace at `path`; returns an fd of the previous one
    (pass it to `return_to`). Threads started afterwards inherit the new namespace."""
    previous = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    fd = os.open(path, os.O_RDONLY)
    try:
        _setns(fd)
    finally:
        os.close(fd)
    return previous


def return_to(previous_fd: int) -> None:
    try:
        _setns(previous_fd)
    finally:
        os.close(previous_fd)


def current_netns_inode() -> int:
    return os.stat("/proc/thread-self/ns/net").st_ino


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")
