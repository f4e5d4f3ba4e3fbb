"""The cloud-init NoCloud seed of one instance, as EC2's metadata would present it to Ubuntu:
instance id and hostname, the key pair's public key for the default user `ubuntu`, and the
address moto gave the instance."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from xeoncluster.standin.osimage import DPKG_LOCK_FILE

SEED_DIR = "var/lib/cloud/seed/nocloud"


@dataclass(frozen=True)
class Seed:
    instance_id: str
    private_ip: str
    prefixlen: int
    gateway: str
    nameserver: str
    public_ip: str | None
    public_key: str | None
    dpkg_lock_seconds: int = 0
    mirror_url: str | None = None  # set: apt sources and pip.conf point at the stand-in's mirror
    api_port: int = 5000           # moto's, on the gateway

    @property
    def hostname(self) -> str:
        return "ip-" + self.private_ip.replace(".", "-")

    def meta_data(self) -> dict:
        return {"instance-id": self.instance_id, "local-hostname": self.hostname}

    def user_data(self) -> str:
        config = {
            "system_info": {"default_user": {
                "name": "ubuntu", "gecos": "Ubuntu", "groups": ["adm", "sudo"], "shell": "/bin/bash",
                "sudo": ["ALL=(ALL) NOPASSWD:ALL"], "lock_passwd": True}},
            "users": ["default"],
            "ssh_authorized_keys": [self.public_key] if self.public_key else [],
            # Not manage_etc_hosts: Debian's template maps the hostname to 127.0.1.1, and gloo then
            # advertises that address to the other ranks. As on EC2, the VPC resolver answers it.
            "manage_etc_hosts": False,
        }
        return "#cloud-config\n" + yaml.safe_dump(config, sort_keys=False)

    def network_config(self) -> dict:
        addresses = [f"{self.private_ip}/{self.prefixlen}"] + ([f"{self.public_ip}/32"] if self.public_ip else [])
        # gateway4, not routes: Debian's ENI renderer turns routes into net-tools `route` calls.
        return {"version": 2, "ethernets": {"host0": {"addresses": addresses, "gateway4": self.gateway}}}


def write_seed(root: Path, seed: Seed) -> None:
    """Write into the instance's upper layer, where it shadows a baked image's old seed."""
    target = root / SEED_DIR
    target.mkdir(parents=True, exist_ok=True)
    (target / "meta-data").write_text(yaml.safe_dump(seed.meta_data()))
    (target / "user-data").write_text(seed.user_data())
    (target / "network-config").write_text(yaml.safe_dump(seed.network_config()))
    if seed.dpkg_lock_seconds > 0:
        lock = root / DPKG_LOCK_FILE.lstrip("/")
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(f"{seed.dpkg_lock_seconds}\n")
    if seed.mirror_url:
        write_mirror_config(root, seed.mirror_url)
    # /etc/machine-id is left as the image has it, as EC2 does: an image that kept its master's id
    # gives every instance that id (the base image's is empty, so first boot makes one).
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/resolv.conf").write_text(f"nameserver {seed.nameserver}\nsearch ec2.internal\n")
    # Where this "cloud"'s API is, for programs on the instance (the run agent): real EC2 needs no
    # setting, its endpoints resolve; here moto listens on the bridge's host address.
    (root / "etc/environment").write_text(f"AWS_ENDPOINT_URL=http://{seed.gateway}:{seed.api_port}\n")


def write_mirror_config(root: Path, mirror_url: str) -> None:
    host = mirror_url.split("//", 1)[1].split(":", 1)[0].split("/", 1)[0]
    (root / "etc/apt").mkdir(parents=True, exist_ok=True)
    (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] {mirror_url} ./\n")
    (root / "etc/pip.conf").write_text(f"[global]\nindex-url = {mirror_url}simple/\ntrusted-host = {host}\n"
                                        # Indexes the CLI adds (e.g. the PyTorch CPU index) cannot be
                                        # reached: fail each at once instead of retrying 5 times.
                                        "retries = 0\n")
