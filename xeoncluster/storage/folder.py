"""Storage in a folder (the local provider's default: $XEONCLUSTER_HOME/storage). Writes are atomic:
a file appears under its key only once it is complete."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from xeoncluster.storage.base import StorageLocation, StoredObject


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
