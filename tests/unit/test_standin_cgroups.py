"""The stand-in's cgroup per instance, on this machine's real cgroup trees (root only)."""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from xeoncluster.standin import cgroups

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not cgroups.group_dirs("probe"),
                                reason="needs root and a cgroup tree")


def test_a_command_runs_in_its_instance_s_own_group_and_kill_ends_everything_there() -> None:
    name = f"i-test{uuid.uuid4().hex[:8]}"
    # A child that ignores SIGTERM and a grandchild: a shutdown that overran leaves such processes.
    script = "trap '' TERM; sleep 600 & sleep 600"
    proc = subprocess.Popen(cgroups.entering(name, ["sh", "-c", script]), start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not all(len(_procs(group)) == 3 for group in cgroups.group_dirs(name)):  # sh and both sleeps
            assert time.monotonic() < deadline, [_procs(group) for group in cgroups.group_dirs(name)]
            time.sleep(0.05)
        assert f"/{cgroups.GROUP}/{name}" in Path(f"/proc/{proc.pid}/cgroup").read_text()
        cgroups.kill(name)
        assert proc.wait(10) == -9
        assert not any(_procs(group) for group in cgroups.group_dirs(name))
    finally:
        proc.kill()
        cgroups.remove(name)
    assert cgroups.leftovers([name]) == []


def _procs(group: Path) -> list[str]:
    return (group / "cgroup.procs").read_text().split() if group.exists() else []
