"""Ships the node package and local data files to every node, only when they changed.

Each payload is a tarball named by its content digest; a node that already holds that digest is
skipped, so a second `train` sends nothing.
"""
from __future__ import annotations

import hashlib
import io
import secrets
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xeoncluster.core.errors import ConfigError, RemoteError
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import all_of, in_turn, quietly, remote_command, word, written_to
from xeoncluster.wire.layout import PACKAGE_ROOT

if TYPE_CHECKING:  # paramiko's import is a tenth of a CLI call's: a digest needs none of it
    from xeoncluster.remote.shell import NodeShell


@dataclass(frozen=True)
class SyncResult:
    digest: str
    sent_to: tuple[str, ...]
    remote_path: str


def tree_digest(root: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_tarball(root: Path, files: list[Path], prefix: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in files:
            info = tar.gettarinfo(str(path), arcname=f"{prefix}/{path.relative_to(root)}")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            with open(path, "rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()


def sync_tree(shell: NodeShell, nodes: list[Node], root: Path, files: list[Path], name: str) -> SyncResult:
    """Put `files` (relative to `root`) under ~/xeoncluster/NAME on every node that lacks this digest."""
    digest = tree_digest(root, files)
    target = f"{PACKAGE_ROOT}/{name}"
    marker = f"{target}/.xeoncluster-digest"
    checks = shell.run(nodes, quietly(remote_command("cat", marker)))
    stale = [n for n in nodes if checks[n.name].stdout.strip() != digest]
    if stale:
        # Named for this sender too: the CLI and the master's agent may both send the same digest at once.
        archive = f"{PACKAGE_ROOT}-{digest}-{secrets.token_hex(4)}.tar.gz"
        with tempfile.NamedTemporaryFile(suffix=".tar.gz") as handle:
            handle.write(build_tarball(root, files, name))
            handle.flush()
            for node in stale:
                shell.put(node, Path(handle.name), archive)
        results = shell.run(stale, unpack_command(target, marker, digest, archive))
        failed = [r for r in results.values() if not r.ok]
        if failed:
            raise RemoteError(f"could not unpack {name} on {failed[0].node}: {failed[0].last_line()}")
    return SyncResult(digest, tuple(n.name for n in stale), target)


def unpack_command(target: str, marker: str, digest: str, archive: str) -> str:
    """Unpack under a lock, and not at all once the marker holds this digest: a second sender that read
    the marker before the first wrote it would otherwise remove the tree under ranks already importing
    from it (the agent ships the package at its first beat, as `train` launches)."""
    replace = all_of(remote_command("rm", "-rf", target), remote_command("tar", "-C", PACKAGE_ROOT, "-xzf", archive),
                     remote_command("mkdir", "-p", target), written_to(remote_command("echo", digest), marker))
    held = f'[ "$({quietly(remote_command("cat", marker))})" = {word(digest)} ]'
    script = in_turn(f"{held} || {{ {replace}; }}",
                     "status=$?", remote_command("rm", "-f", archive), 'exit "$status"')
    return all_of(remote_command("mkdir", "-p", PACKAGE_ROOT),
                  remote_command("flock", f"{PACKAGE_ROOT}/.sync.lock", "sh", "-c", script))


def sync_data_file(shell: NodeShell, nodes: list[Node], local: Path) -> str:
    """Copy one local data file to the same path on every node; returns that path (relative to home),
    which holds the file's own name as it is: a value, to be quoted (remote_command) wherever it is used."""
    if not local.is_file():
        raise ConfigError(f"data file {local} does not exist", hint="pass an existing --train-file/--eval-file")
    digest = tree_digest(local.parent, [local])
    result = sync_tree(shell, nodes, local.parent, [local], f"data/{digest}")
    return f"{result.remote_path}/{local.name}"
