"""The node package's sync, run by real sh in a folder that stands for a node's home."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from xeoncluster.providers.base import Node
from xeoncluster.remote.package_sync import sync_tree
from xeoncluster.remote.shell import CommandResult

NODE = Node(name="node0", id="n0", private_ip="10.0.0.2", ssh_host="", role="master", market="local")


class HomeShell:
    """A node whose login home is `home`: commands run there, as SSH runs them in the home."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=self.home, timeout=30)
        return {n.name: CommandResult(n.name, proc.returncode, proc.stdout, proc.stderr) for n in nodes}

    def put(self, node: Node, local: Path, remote_path: str) -> None:
        shutil.copyfile(local, self.home / remote_path)


class LateShell(HomeShell):
    """A second sender that read the marker before the first sender wrote it: its probe finds nothing."""

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        if command.startswith("cat "):
            return {n.name: CommandResult(n.name, 0, "", "") for n in nodes}
        return super().run(nodes, command)


def package(tmp_path: Path) -> tuple[Path, list[Path]]:
    root = tmp_path / "src"
    (root / "xeoncluster" / "node").mkdir(parents=True)
    files = [root / "xeoncluster" / "__init__.py", root / "xeoncluster" / "node" / "__init__.py"]
    for path in files:
        path.write_text("# node code\n")
    return root, files


def test_a_second_sender_of_the_same_digest_leaves_the_tree_ranks_import_from(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    root, files = package(tmp_path)
    first = sync_tree(HomeShell(home), [NODE], root, files, "lib")  # type: ignore[arg-type]
    module = home / "xeoncluster" / "lib" / "xeoncluster" / "node" / "__init__.py"
    importing = module.stat().st_ino  # a rank is importing from it now
    second = sync_tree(LateShell(home), [NODE], root, files, "lib")  # type: ignore[arg-type]
    assert first.sent_to == second.sent_to == ("node0",)
    assert module.stat().st_ino == importing, "the second sender removed the tree and unpacked it again"
    assert sorted(p.name for p in home.iterdir()) == ["xeoncluster"]  # both archives are gone
    assert (home / "xeoncluster" / "lib" / ".xeoncluster-digest").read_text().strip() == first.digest


def test_a_new_digest_replaces_the_tree(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    root, files = package(tmp_path)
    sync_tree(HomeShell(home), [NODE], root, files, "lib")  # type: ignore[arg-type]
    files[1].write_text("# newer node code\n")
    newer = sync_tree(HomeShell(home), [NODE], root, files, "lib")  # type: ignore[arg-type]
    assert (home / "xeoncluster" / "lib" / "xeoncluster" / "node" / "__init__.py").read_text() == "# newer node code\n"
    assert (home / "xeoncluster" / "lib" / ".xeoncluster-digest").read_text().strip() == newer.digest
    again = sync_tree(HomeShell(home), [NODE], root, files, "lib")  # type: ignore[arg-type]
    assert again.sent_to == ()
