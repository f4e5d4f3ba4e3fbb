"""Two cold `up`s of different clusters at once: one bakes, the other waits and reuses the image."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import LocalEnv, leftovers

SUBNET = "10.215.1.0/24"


@pytest.fixture
def cold_env(tmp_path: Path) -> Iterator[LocalEnv]:
    """A fresh local.root (no image yet) on its own subnet, cleaned up even when the test fails."""
    if os.geteuid() != 0:
        pytest.skip("the local provider needs root")
    env = LocalEnv(base=tmp_path, home=tmp_path / "home", root=tmp_path / "root", config=tmp_path / "cluster.yaml")
    env.home.mkdir()
    env.config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {env.root}\n")
    yield env
    for name in ("e2epa", "e2epb"):
        env.cli("down", "--name", name)
    subprocess.run(["rm", "-rf", "--one-file-system", str(env.root)], check=False)


def test_parallel_cold_ups_bake_once_and_both_clusters_work(cold_env: LocalEnv) -> None:
    procs = {name: subprocess.Popen(
        [sys.executable, "-m", "xeoncluster.cli", "--config", str(cold_env.config), "up", "--name", name,
         "--nodes", "1"], env={**os.environ, "XEONCLUSTER_HOME": str(cold_env.home)}, cwd=cold_env.base,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("e2epa", "e2epb")}
    outputs = {name: proc.communicate(timeout=900) for name, proc in procs.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name}: {outputs[name]}"
    combined = "".join(out + err for out, err in outputs.values())
    assert "waiting for another up that is baking image" in combined
    assert combined.count("baked image") == 1
    for name in ("e2epa", "e2epb"):
        cold_env.ok("exec", "--name", name, "--", "test -x ~/venv/bin/python")
    images = [p.name for p in (cold_env.root / "images").iterdir() if not p.name.startswith(".")]
    assert len(images) == 1
    for name in ("e2epa", "e2epb"):
        cold_env.ok("down", "--name", name)
        assert leftovers(cold_env, name)["namespaces"] == []
