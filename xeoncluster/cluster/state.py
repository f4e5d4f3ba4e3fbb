"""The per-cluster state folder: state.json, the lock, the key, ssh files, logs and runs."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from xeoncluster.core.errors import BusyError, ConfigError, XeonClusterError
from xeoncluster.providers.base import Image
from xeoncluster.providers.node_kinds import Node, master_of
from xeoncluster.storage.base import StorageLocation
from xeoncluster.wire.contract import Versioned


def xeoncluster_home() -> Path:
    home = Path(os.environ.get("XEONCLUSTER_HOME") or Path.home() / ".xeoncluster")
    if home.exists() and not home.is_dir():
        raise ConfigError(f"XEONCLUSTER_HOME={home} is not a directory",
                          hint="point XEONCLUSTER_HOME at a folder (it is created if missing), or unset it")
    return home


class ClusterStatus(StrEnum):
    CREATING = "creating"  # `up` is running (or died before it finished)
    READY = "ready"
    FAILED = "failed"      # a failed `up` kept for inspection (--keep-on-failure)
    REMOVING = "removing"  # `down` has started


class ImageRecord(BaseModel):
    """The image decision `up` executed: the key, what it did, and the image nodes start from (None:
    every node runs the playbooks), or the id of one still being baked in the background."""

    key: str | None
    action: str
    image: Image | None = None
    background: str | None = None
    # What nodes start from before a bake, as `up` resolved it: the run agent launches replacements
    # from it and must not resolve it again (its role has no access to where the provider looks).
    base: str | None = None


class ClusterRecord(Versioned):
    """What state.json holds. It mirrors what exists; the provider's tags/namespaces stay the truth."""

    name: str
    provider: str
    status: ClusterStatus = ClusterStatus.CREATING
    config: dict[str, Any] = Field(default_factory=dict)
    steps_done: list[str] = Field(default_factory=list)
    resources: dict[str, list[str]] = Field(default_factory=dict)
    nodes: list[Node] = Field(default_factory=list)
    image: ImageRecord | None = None
    created_at: float = Field(default_factory=time.time)
    replaced: list[str] = Field(default_factory=list)  # nodes replaced since `up` created the cluster
    storage: StorageLocation | None = None  # where runs keep what must outlive the nodes
    # Who made the cluster, as the provider tags it (AWS: the creator's UserId): the run agent on the
    # master launches replacements for that owner, and the master's role requires it on its launches.
    owner: str | None = None

    @field_validator("storage", mode="before")
    @classmethod
    def _storage(cls, value: Any) -> Any:
        return StorageLocation.from_dict(value) if isinstance(value, dict) else value

    @property
    def ready(self) -> bool:
        return self.status is ClusterStatus.READY

    def node_list(self) -> list[Node]:
        return list(self.nodes)

    @property
    def master(self) -> Node | None:
        return master_of(self.nodes)

    def set_nodes(self, nodes: list[Node]) -> None:
        self.nodes = list(nodes)

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    def add_resources(self, kind: str, ids: list[str]) -> None:
        known = self.resources.setdefault(kind, [])
        known.extend(i for i in ids if i not in known)

    def drop_resources(self, kind: str, ids: list[str]) -> None:
        if kind in self.resources:
            self.resources[kind] = [i for i in self.resources[kind] if i not in ids]


class StateDir:
    def __init__(self, name: str, home: Path | None = None) -> None:
        self.name = name
        self.home = home or xeoncluster_home()
        self.path = self.home / "clusters" / name

    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    @property
    def key(self) -> Path:
        return self.path / "id_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self.path / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.path / "known_hosts"

    @property
    def hostfile(self) -> Path:
        return self.path / "hosts"

    @property
    def logs(self) -> Path:
        """Outside the cluster's folder: a failed `up`'s rollback, and `down`, remove that folder, and
        the log an error names must still be there to read."""
        return self.home / "logs" / self.name

    @property
    def runs(self) -> Path:
        return self.path / "runs"

    def exists(self) -> bool:
        return self.state_file.is_file()

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.runs.mkdir(exist_ok=True)

    def load(self) -> ClusterRecord | None:
        if not self.exists():
            return None
        try:
            return ClusterRecord.model_validate_json(self.state_file.read_text())
        except ValueError as exc:
            raise XeonClusterError(
                f"state file {self.state_file} is corrupt: {str(exc).splitlines()[0]}",
                hint=f"run `xeoncluster down --name {self.name}`: it removes local nodes by name "
                     "(add --provider aws for an AWS cluster: it finds those by tag)",
            ) from None

    def save(self, record: ClusterRecord) -> None:
        self.create()
        atomic_write(self.state_file, record.model_dump_json(indent=2))

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def forget_hosts(self) -> None:
        for path in (self.known_hosts, self.ssh_config, self.hostfile):
            path.unlink(missing_ok=True)

    def forget_host(self, node: str) -> None:
        """Drop one node's pinned key: its replacement presents a new one."""
        if self.known_hosts.exists():
            kept = [line for line in self.known_hosts.read_text().splitlines() if line.split(",")[0] != node]
            atomic_write(self.known_hosts, "".join(f"{line}\n" for line in kept))

    def new_log(self, command: str) -> Path:
        self.logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self.logs / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"

    def ensure_key(self) -> Path:
        """Create the cluster's ed25519 key once. It leaves this folder for the master's ~/.ssh (mpiexec's) and
        its run agent's folder (operations/up_nodes.py, runs/client.py); on a cloud the agent copies it from
        there to every worker's agent folder, so that a worker can take over a lost master (agent/replica.py).
        It never goes into an image, a tag or user-data."""
        self.create()
        if not self.key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"xeoncluster-{self.name}", "-f", str(self.key)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        os.chmod(self.key, 0o600)
        return self.key

    def public_key(self) -> str:
        return self.key.with_suffix(".pub").read_text().strip()

    def holder(self) -> str | None:
        """What holds the cluster's lock right now (a `train`, `up` or `down`), without taking it."""
        if not (self.path / "lock").exists():
            return None
        with open(self.path / "lock", "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                return handle.read().strip() or "another command"
            return None

    @contextmanager
    def lock(self, command: str, *, force: bool = False, busy_hint: str | None = None) -> Iterator[str | None]:
        """Hold the cluster for `command`. Yields None, or with `force` and another holder, what holds it
        (then the caller goes on without the lock)."""
        fresh = not self.path.exists()
        self.create()
        with open(self.path / "lock", "a+") as handle:
            try:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.seek(0)
                    holder = handle.read().strip() or "another command"
                    if force:
                        handle.close()
                        yield holder
                        return
                    raise BusyError(f"cluster '{self.name}' is busy: {holder} is running on it",
                                    hint=busy_hint or "wait for it to finish, or use another --name") from None
                handle.seek(0)
                handle.truncate()
                handle.write(f"`{command}` (pid {os.getpid()})")
                handle.flush()
                yield None
            finally:
                handle.close()
                if fresh and not self.exists():
                    self._remove_if_empty()

    def _remove_if_empty(self) -> None:
        """A command refused before it created anything, or an `up` rolled back, leaves no folder
        behind (its log lives under logs/, outside it)."""
        if self.path.exists():
            shutil.rmtree(self.path, ignore_errors=True)


def atomic_write(path: Path, text: str, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

