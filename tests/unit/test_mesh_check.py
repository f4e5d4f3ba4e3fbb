"""The master's reach check runs real bash; a fake `ssh` on PATH decides which nodes answer."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from xeoncluster.core.errors import XeonClusterError
from xeoncluster.operations.up_nodes import check_mesh
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import CommandResult

NODES = [Node(name=f"node{i}", id=f"n{i}", private_ip=f"10.0.0.{i + 2}", ssh_host="", role="worker",
              market="local") for i in range(3)]


class BashShell:
    """Runs the command the master would run, in a local bash with a fake ssh first on PATH."""

    def __init__(self, bin_dir: Path) -> None:
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=self.env, timeout=30)
        return {nodes[0].name: CommandResult(nodes[0].name, proc.returncode, proc.stdout, proc.stderr)}


class Session:
    class reporter:  # noqa: N801 - the attribute the check reads
        log_path = None


def fake_ssh(tmp_path: Path, unreachable: set[str]) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ssh"
    dead = " ".join(sorted(unreachable))
    script.write_text(f'#!/bin/bash\nhost="${{@: -2:1}}"\necho "$host" >> "{tmp_path / "dialed"}"\n'
                      f'for d in {dead}; do [ "$host" = "$d" ] && exit 255; done\nexit 0\n')
    script.chmod(0o755)
    return bin_dir


def test_every_node_answers(tmp_path: Path) -> None:
    check_mesh(Session(), NODES, BashShell(fake_ssh(tmp_path, set())))  # type: ignore[arg-type]
    # It passed because the master dialed every node by name, each once, and each answered.
    assert sorted((tmp_path / "dialed").read_text().split()) == ["node0", "node1", "node2"]


def test_an_unreachable_node_is_named(tmp_path: Path) -> None:
    with pytest.raises(XeonClusterError, match=r"cannot reach node1, node2 by name"):
        check_mesh(Session(), NODES, BashShell(fake_ssh(tmp_path, {"node1", "node2"})))  # type: ignore[arg-type]
