"""The base OS tree every instance boots from: Debian bookworm built once with mmdebstrap,
cached under a hash of its recipe, with what makes it behave like a fresh cloud image."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "sudo", "python3", "python3-venv",
    "cloud-init", "iproute2", "ifupdown", "netbase", "locales", "ca-certificates", "procps",
)
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
DPKG_LOCK_FILE = "/etc/xeoncluster-standin/dpkg-lock-seconds"

CLOUD_CFG = """\
# The stand-in's NoCloud seed sits in /var/lib/cloud/seed/nocloud (written per instance).
datasource_list: [ NoCloud, None ]
# The CLI writes the node's apt sources; cloud-init must not replace them with Debian's mirror.
apt:
  preserve_sources_list: true
locale: C.UTF-8
"""

# apt and dpkg take fcntl (POSIX) locks, which flock(1) does not conflict with: hold them the same way.
HOLD_LOCKS = ("import fcntl, os, time; p = '" + DPKG_LOCK_FILE + "'; n = float(open(p).read()); os.remove(p); "
              "held = [open(f, 'w') for f in ('/var/lib/dpkg/lock-frontend', '/var/lib/dpkg/lock')]; "
              "[fcntl.lockf(f, fcntl.LOCK_EX) for f in held]; time.sleep(n)")

DPKG_LOCK_UNIT = f"""\
[Unit]
Description=Hold the dpkg lock at first boot, as apt-daily/unattended-upgrades do on Ubuntu
ConditionFileNotEmpty={DPKG_LOCK_FILE}
Before=ssh.service

[Service]
Type=simple
ExecStart=/usr/bin/python3 -c "{HOLD_LOCKS}"

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class Recipe:
    suite: str = "bookworm"
    packages: tuple[str, ...] = PACKAGES
    mirrors: tuple[str, ...] = MIRRORS
    files: dict[str, str] = field(default_factory=lambda: {
        "etc/cloud/cloud.cfg.d/90-xeoncluster-standin.cfg": CLOUD_CFG,
        "etc/systemd/system/xeoncluster-dpkg-lock.service": DPKG_LOCK_UNIT,
    })
    # Bump when the build steps below change in a way the fields above do not show.
    revision: int = 1

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BuildResult:
    path: Path
    built: bool
    seconds: float


def base_tree(cache: Path, recipe: Recipe = Recipe()) -> Path:
    return cache / f"base-{recipe.digest()}"


def ensure_base(cache: Path, recipe: Recipe = Recipe(), log: Callable[[str], None] = print) -> BuildResult:
    target = base_tree(cache, recipe)
    if (target / "etc/os-release").exists():
        return BuildResult(target, False, 0.0)
    started = time.monotonic()
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    log(f"building the base OS tree {target.name} with mmdebstrap (about 2 minutes)")
    subprocess.run(["mmdebstrap", "--variant=apt", "--include=" + ",".join(recipe.packages),
                    recipe.suite, str(staging), *recipe.mirrors], check=True,
                   stdout=subprocess.DEVNULL)
    customize(staging, recipe)
    staging.rename(target)
    _prune(cache, keep=target)
    return BuildResult(target, True, time.monotonic() - started)


def customize(root: Path, recipe: Recipe) -> None:
    for rel, text in recipe.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "xeoncluster-dpkg-lock.service").symlink_to("/etc/systemd/system/xeoncluster-dpkg-lock.service")
    # Like a fresh cloud image: no apt sources that the nodes cannot reach, no package lists,
    # no host keys and no machine id (each instance makes its own at first boot).
    (root / "etc/apt/sources.list").write_text("")
    for path in (root / "etc/apt/sources.list.d").glob("*"):
        path.unlink()
    for path in (root / "var/lib/apt/lists").glob("*_*"):
        path.unlink()
    for path in (root / "etc/ssh").glob("ssh_host_*"):
        path.unlink()
    (root / "etc/machine-id").write_text("")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)


def _prune(cache: Path, keep: Path) -> None:
    """Trees of older recipes (and the apt repositories resolved against them) are not used again."""
    for old in cache.glob("base-*"):
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
    for old in cache.glob("apt-*"):
        shutil.rmtree(old, ignore_errors=True)
