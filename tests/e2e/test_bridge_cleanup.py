"""The bridge goes with the last cluster on it, also after a rolled-back up or a dead node."""
from __future__ import annotations

import os
import signal
import subprocess
import time

from tests.conftest import CliResult, run_cli
from tests.e2e.conftest import LocalEnv, leftovers
from xeoncluster.providers.local.net import bridge_name

SUBNET = "10.215.3.0/24"


def own(env: LocalEnv, *args: str) -> CliResult:
    config = env.base / "bridge-cleanup.yaml"
    config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {env.root}\n")
    return run_cli(["--config", str(config), *args], env.home, cwd=env.base)


def bridge_exists() -> bool:
    return subprocess.run(["ip", "link", "show", bridge_name(SUBNET)], capture_output=True).returncode == 0


def test_rolled_back_up_at_launch_master_removes_the_bridge(local_env: LocalEnv, warm_image: str) -> None:
    name = "e2ebrfail"
    try:
        for _ in range(3):
            # A folder where the pinned host keys go: node0's sshd is up, then pinning its key fails.
            (local_env.home / "clusters" / name / "known_hosts").mkdir(parents=True, exist_ok=True)
            result = own(local_env, "up", "--name", name, "--nodes", "2")
            assert result.code == 1 and "up failed at step 'launch master'" in result.err, result.err
            assert "everything it created was removed" in result.err
            assert not bridge_exists(), "the rollback said everything was removed"
            assert leftovers(local_env, name)["namespaces"] == []
    finally:
        own(local_env, "down", "--name", name)


def test_down_after_a_node_died_removes_the_bridge(local_env: LocalEnv, warm_image: str) -> None:
    name = "e2ebrdead"
    try:
        for kill in ("sshd", "namespace", "sshd", "namespace"):
            assert own(local_env, "up", "--name", name, "--nodes", "3").code == 0
            if kill == "sshd":
                os.kill(int((local_env.root / "clusters" / name / "node1" / "sshd.pid").read_text()), signal.SIGKILL)
                time.sleep(0.3)
            else:
                subprocess.run(["ip", "netns", "del", f"xc-{name}-node2"], check=True)
            down = own(local_env, "down", "--name", name)
            assert down.code == 0, down.err
            assert not bridge_exists(), f"after a dead node ({kill})"
            assert leftovers(local_env, name) == {"namespaces": [], "processes": [], "mounts": [], "files": []}
    finally:
        own(local_env, "down", "--name", name)
