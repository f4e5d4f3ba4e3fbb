"""The OS-package playbook run by real bash against fake `sudo`, `apt-get`, `systemctl` and `cloud-init`.

A fresh Ubuntu instance holds the dpkg lock at first boot (cloud-init, apt-daily, unattended-upgrades):
the playbook must wait for cloud-init, stop the timers, make apt wait for the lock, and retry once.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from xeoncluster.cluster.playbook import PlaybookRunner, load_playbook
from xeoncluster.core.errors import RemoteError
from xeoncluster.core.paths import project_file
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import CommandResult

NODE = Node(name="node0", id="i-1", private_ip="10.0.0.2", ssh_host="", role="master", market="spot")
FAKES = {
    # sudo runs the command as is; the fakes record every call in $CALLS.
    "sudo": 'while [ "${1#*=}" != "$1" ]; do export "$1"; shift; done; exec "$@"',
    "cloud-init": 'echo "cloud-init $*" >> "$CALLS"',
    "systemctl": 'echo "systemctl $*" >> "$CALLS"',
    "tee": 'cat > /dev/null; echo "tee $*" >> "$CALLS"',
    "mv": 'echo "mv $*" >> "$CALLS"',
    "sleep": 'echo "sleep $*" >> "$CALLS"',
    # apt-get fails the first $APT_FAILURES installs with the lock error real Ubuntu prints.
    "apt-get": ('echo "apt-get $*" >> "$CALLS"; case "$*" in *install*) n=$(grep -c "apt-get.*install" "$CALLS");'
                ' if [ "$n" -le "${APT_FAILURES:-0}" ]; then echo "E: Could not get lock /var/lib/dpkg/lock-frontend"'
                ' >&2; exit 100; fi;; esac'),
}


class FakeNodeShell:
    def __init__(self, bin_dir: Path, calls: Path, apt_failures: int) -> None:
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls),
                    "APT_FAILURES": str(apt_failures)}

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        if "|| echo MISSING" in command:
            command = command.replace("( command -v", "( false").replace("( test -e", "( false").replace(
                "( /usr/bin/python3", "( false")
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=self.env, timeout=60)
        return {nodes[0].name: CommandResult(nodes[0].name, proc.returncode, proc.stdout, proc.stderr)}


def run_os_playbook(tmp_path: Path, apt_failures: int, variables: dict[str, str] | None = None,
                    apply_os_steps: bool = True) -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    book = load_playbook(project_file("playbooks", "10-os-packages.yaml"))
    values = {"apt_sources": "", "apt_proxy": ""} | (variables or {})
    runner = PlaybookRunner(FakeNodeShell(bin_dir, calls, apt_failures), values, apply_os_steps=apply_os_steps,
                            log=lambda text: None)
    runner.run_all([book], [NODE], lambda text: None)
    return calls.read_text().splitlines()


def test_first_boot_jobs_are_stopped_before_apt(tmp_path: Path) -> None:
    calls = run_os_playbook(tmp_path, apt_failures=0)
    first_apt = next(i for i, c in enumerate(calls) if c.startswith("apt-get"))
    before = calls[:first_apt]
    assert "cloud-init status --wait" in before
    for unit in ("apt-daily.timer", "apt-daily-upgrade.timer", "unattended-upgrades.service"):
        assert f"systemctl disable {unit}" in before
    assert "tee /etc/apt/apt.conf.d/90xeoncluster" in before  # DPkg::Lock::Timeout for every apt call
    assert calls[-1] == "apt-get install -y -qq libgoogle-perftools4 numactl python3-venv util-linux"


def test_a_lock_held_past_the_timeout_is_retried_once(tmp_path: Path) -> None:
    calls = run_os_playbook(tmp_path, apt_failures=1)
    assert sum(c.startswith("apt-get install") for c in calls) == 2 and "sleep 15" in calls


def test_a_lock_that_never_frees_fails_the_step(tmp_path: Path) -> None:
    with pytest.raises(RemoteError, match=r"tcmalloc, numactl, python venv.*exit 100"):
        run_os_playbook(tmp_path, apt_failures=2)


def test_configured_mirror_replaces_the_sources(tmp_path: Path) -> None:
    calls = run_os_playbook(tmp_path, 0, {"apt_sources": "'deb [trusted=yes] http://10.0.0.1:8081/ ./'",
                                          "apt_proxy": "http://proxy:3128"})
    assert "tee /etc/apt/sources.list.d/xeoncluster.list" in calls
    assert "tee /etc/apt/apt.conf.d/91xeoncluster-proxy" in calls
    assert calls.index("tee /etc/apt/sources.list.d/xeoncluster.list") < calls.index("apt-get update -qq")


def test_nodes_sharing_the_host_change_nothing(tmp_path: Path) -> None:
    with pytest.raises(RemoteError, match="missing on this machine"):
        run_os_playbook(tmp_path, 0, {"apt_sources": "'deb http://x/ ./'"}, apply_os_steps=False)
    assert (tmp_path / "calls").read_text() == ""

