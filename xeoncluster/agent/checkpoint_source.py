"""Where a run's checkpoints and results are, as the agent reads them for storage, and where a
checkpoint from storage goes back: the master's run folder.

On a cloud the agent runs on the master, so that folder is local: a checkpoint is snapshotted with
hard links (instant, and safe from the Trainer deleting old checkpoints meanwhile). For nodes on
this machine the agent runs here and copies over SSH.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Protocol

from xeoncluster.core.errors import RemoteError
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.archive import HARD_LINKS_AS_FILES, unpack
from xeoncluster.wire.run_outputs import is_output

STAGING = ".xc-storage"
FETCHED = "xc-storage-"  # the local copy of what was fetched over SSH, removed once stored


class CheckpointSource(Protocol):
    def snapshot(self, step: int) -> Path:
        """A local folder holding checkpoint-STEP's files, stable until released; a folder that does not
        exist when the checkpoint is gone (the Trainer keeps only the newest)."""

    def results(self, names: tuple[str, ...] | None, with_model: bool = True) -> Path:
        """A local folder with those of `names` the run wrote (None: all its output), and model/ if any
        (and `with_model`)."""

    def release(self, path: Path) -> None: ...

    def place(self, folder: Path) -> None:
        """Put a checkpoint folder (from storage) into the master's run folder."""


class OnMaster:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def snapshot(self, step: int) -> Path:
        target = self.run_dir / STAGING / f"checkpoint-{step}"
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        source = self.run_dir / f"checkpoint-{step}"
        copied = subprocess.run(["cp", "-al", str(source), str(target)], capture_output=True, text=True)
        if copied.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            if not source.is_dir():  # rotated away by the Trainer while older uploads were still going
                return target
            raise OSError(f"could not snapshot {source}: {copied.stderr.strip()}")
        return target

    def results(self, names: tuple[str, ...] | None, with_model: bool = True) -> Path:
        target = self.run_dir / STAGING / "results"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        if names is None:
            names = tuple(p.name for p in self.run_dir.iterdir() if is_output(p.name))
        for name in dict.fromkeys((*names, *(["model"] if with_model else []))):
            if (self.run_dir / name).exists():
                subprocess.run(["cp", "-al", str(self.run_dir / name), str(target / name)], check=True,
                               capture_output=True)
        return target

    def release(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def place(self, folder: Path) -> None:
        target = self.run_dir / folder.name
        shutil.rmtree(target, ignore_errors=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        shutil.move(str(folder), str(target))


class OverSsh:
    def __init__(self, shell: NodeShell, master: Node, run_dir: str) -> None:
        self.shell, self.master, self.run_dir = shell, master, run_dir

    def snapshot(self, step: int) -> Path:
        return self._fetch([f"checkpoint-{step}"]) / f"checkpoint-{step}"

    def results(self, names: tuple[str, ...] | None, with_model: bool = True) -> Path:
        if names is None:
            listing = self.shell.run([self.master], f"ls -A {shlex.quote(self.run_dir)}")[self.master.name]
            names = tuple(n for n in listing.stdout.split() if is_output(n))
        return self._fetch(list(dict.fromkeys([*names, *(["model"] if with_model else [])])))

    def _fetch(self, names: list[str]) -> Path:
        packed = f"{self.run_dir}/{STAGING}.tar"
        wanted = " ".join(shlex.quote(n) for n in names)
        # None of `names` there (no TensorBoard files, say) is an empty archive, not an error.
        command = (f"cd {shlex.quote(self.run_dir)} && set -- $(ls -d {wanted} 2>/dev/null) && "
                   f"tar -cf {shlex.quote(packed)} {HARD_LINKS_AS_FILES} -T /dev/null \"$@\"")
        result = self.shell.run([self.master], command)[self.master.name]
        if not result.ok:
            raise RemoteError(f"cannot pack {', '.join(names)} on {self.master.name}: {result.last_line()}")
        local = Path(tempfile.mkdtemp(prefix=FETCHED))
        try:
            self.shell.get(self.master, packed, local / "packed.tar")
            unpack(local / "packed.tar", local / "files", f"{self.master.name}'s run folder")
        except BaseException:
            shutil.rmtree(local, ignore_errors=True)
            raise
        (local / "packed.tar").unlink()
        return local / "files"

    def release(self, path: Path) -> None:
        root = next((p for p in (path, *path.parents) if p.name.startswith(FETCHED)), path)
        shutil.rmtree(root, ignore_errors=True)

    def place(self, folder: Path) -> None:
        packed = folder.parent / f"{folder.name}.tar"
        with tarfile.open(packed, "w") as tar:
            tar.add(folder, arcname=folder.name)
        remote = f"{self.run_dir}/{folder.name}.tar"
        self.shell.run([self.master], f"mkdir -p {shlex.quote(self.run_dir)}")
        self.shell.put(self.master, packed, remote)
        unpack = f"cd {shlex.quote(self.run_dir)} && tar -xf {shlex.quote(remote)} && rm -f {shlex.quote(remote)}"
        result = self.shell.run([self.master], unpack)[self.master.name]
        if not result.ok:
            raise RemoteError(f"cannot put {folder.name} on {self.master.name}: {result.last_line()}")
