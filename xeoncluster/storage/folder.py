"""Storage in a folder (the local provider's default: $XEONCLUSTER_HOME/storage). Writes are atomic:
a file appears under its key only once it is complete."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xeoncluster.storage.base import StaleVersion, StorageLocation, StoredObject, Versioned

# Conditional writes lock a file of their key's here, not beside the key: delete() removes the folders
# it empties, which a lock file would keep, and removing a lock file would let a waiter that opened it
# and a newcomer that made a new one both hold "the" lock.
LOCKS = ".locks"


class FolderStorage:
    def __init__(self, location: StorageLocation) -> None:
        self.location = location
        self.root = Path(location.folder)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents and path != self.root.resolve():
            raise ValueError(f"storage key {key!r} leaves {self.root}")
        return path

    def put_file(self, path: Path, key: str) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        os.close(fd)
        try:
            shutil.copyfile(path, tmp)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put_text(self, key: str, text: str) -> None:
        with tempfile.NamedTemporaryFile("w", delete=False) as handle:
            handle.write(text)
        try:
            self.put_file(Path(handle.name), key)
        finally:
            Path(handle.name).unlink(missing_ok=True)

    def get_file(self, key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self._path(key), path)

    def get_text(self, key: str) -> str | None:
        try:
            return self._path(key).read_text(errors="replace")  # a master's role writes the runs kept here
        except OSError:
            return None

    def objects(self, prefix: str) -> list[StoredObject]:
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        return sorted((StoredObject(str(p.relative_to(self.root)), p.stat().st_size) for p in base.rglob("*")
                       if p.is_file() and not p.name.startswith(".")), key=lambda o: o.key)

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            path = self._path(key)
            path.unlink(missing_ok=True)
            # Folders exist only through their files here, as prefixes do in S3.
            for parent in path.parents:
                if parent == self.root or not parent.is_dir() or any(parent.iterdir()):
                    break
                parent.rmdir()

    def copy(self, source: str, target: str) -> None:
        self.put_file(self._path(source), target)

    def read_versioned(self, key: str) -> Versioned | None:
        try:
            data = self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        return Versioned(data.decode(errors="replace"), _version(data))

    def write_if(self, key: str, text: str, version: str | None) -> str:
        """Compared and written under an exclusive lock of the key, which every process that writes it
        conditionally takes; readers need none, as the file is replaced whole."""
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._locked(target):
            found = self.read_versioned(key)
            if (found.version if found else None) != version:
                raise StaleVersion(f"{target}: changed since version {version or '(none)'} was read")
            data = text.encode()
            _replace(target, data)
            return _version(data)

    @contextmanager
    def _locked(self, target: Path) -> Iterator[None]:
        """Named after the resolved path, which two spellings of one key ('a//b', 'a/./b') share."""
        folder = self.root / LOCKS
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f".{hashlib.sha256(str(target).encode()).hexdigest()}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield


def _version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _replace(target: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
