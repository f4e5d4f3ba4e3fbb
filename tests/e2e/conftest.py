"""A real local cluster: namespaces, sshd, Fabric, Intel MPI. Needs root, as in CI."""
from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import CliResult, run_cli

SUBNET = "10.214.0.0/24"


@dataclass
class LocalEnv:
    base: Path
    home: Path
    root: Path
    config: Path

    def cli(self, *args: str, timeout: float = 900) -> CliResult:
        return run_cli(["--config", str(self.config), *args], self.home, cwd=self.base, timeout=timeout)

    def ok(self, *args: str, timeout: float = 900) -> CliResult:
        result = self.cli(*args, timeout=timeout)
        assert result.code == 0, f"xeoncluster {' '.join(args)} failed ({result.code}):\n{result.out}\n{result.err}"
        return result

    def state(self, name: str) -> dict:
        return json.loads((self.home / "clusters" / name / "state.json").read_text())


def leftovers(env: LocalEnv, name: str) -> dict[str, list[str]]:
    """Everything of cluster `name` the host still holds: namespaces, processes, mounts, files."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    procs = subprocess.run(["pgrep", "-af", f"{env.root}/clusters/{name}/"], capture_output=True, text=True).stdout
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if f"{env.root}/clusters/{name}/" in line]
    return {
        "namespaces": [ns for ns in netns if ns.startswith(f"xc-{name}-")],
        "processes": [line for line in procs.splitlines() if "pgrep" not in line],
        "mounts": mounts,
        "files": [str(p) for p in [env.root / "clusters" / name, env.home / "clusters" / name] if p.exists()],
    }


@pytest.fixture(scope="session")
def local_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEnv]:
    if os.geteuid() != 0:
        pytest.skip("the local provider needs root (network namespaces, mounts); CI runs as root")
    base = tmp_path_factory.mktemp("local")
    env = LocalEnv(base=base, home=base / "home", root=base / "root", config=base / "cluster.yaml")
    env.home.mkdir()
    env.config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {env.root}\n")
    yield env
    for state in (env.home / "clusters").glob("*/state.json"):
        env.cli("down", "--name", state.parent.name)
    for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split():
        if ns.startswith("xc-e2e"):
            env.cli("down", "--name", ns[3:].rsplit("-", 1)[0])


@pytest.fixture(scope="session")
def warm_image(local_env: LocalEnv) -> str:
    """Bake the image once per session (the first up configures the master and bakes it)."""
    result = local_env.ok("up", "--name", "e2ebake", "--nodes", "1")
    assert "baked image" in result.out
    local_env.ok("down", "--name", "e2ebake")
    images = [p.name for p in (local_env.root / "images").iterdir() if not p.name.startswith(".")]
    assert len(images) == 1
    return images[0]


@pytest.fixture(scope="module")
def cluster3(local_env: LocalEnv, warm_image: str) -> Iterator[str]:
    local_env.ok("up", "--name", "e2e3", "--nodes", "3")
    yield "e2e3"
    local_env.ok("down", "--name", "e2e3")
