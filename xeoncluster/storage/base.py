"""The storage interface every backend implements (a folder here, a provider's object store), and the
layout of a cluster's runs in it (on AWS's auto bucket, PREFIX is the user's own id: their policy
reaches no other):

    PREFIX/CLUSTER/runs/RUN/run.json, train.log, events.jsonl
    PREFIX/CLUSTER/runs/RUN/checkpoints/checkpoint-N/...   (MANIFEST.json written last: durable)
    PREFIX/CLUSTER/runs/RUN/results/metrics.json, predictions.json, null_odds.json, loss.png
    PREFIX/CLUSTER/runs/RUN/model/...                       (the final model, Hugging Face format)
    PREFIX/CLUSTER/removed.json                             (when the cluster removed itself, and why)
    PREFIX/CLUSTER/master-lease.json                        (which node is the master, and since which epoch)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from xeoncluster.core.errors import XeonClusterError

MANIFEST = "MANIFEST.json"


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int


@dataclass(frozen=True)
class Versioned:
    """An object's text and a token for the version read: equal tokens, equal content. Opaque: only
    the backend that gave it compares it."""

    text: str
    version: str


class StaleVersion(XeonClusterError):
    """A conditional write refused: the object was made, changed or removed since its version was read."""


@dataclass(frozen=True)
class StorageLocation:
    """A storage root, opaque here: its URL as the user sees it (the provider's own form, or a folder).
    Only the provider that made it reads `container` and `owner`."""

    url: str             # as the user sees it
    container: str = ""  # the provider's store the keys live in (a bucket); "" for a folder
    prefix: str = ""     # key prefix inside the container, without slashes at either end
    folder: str = ""     # a folder on the machine that runs the agent
    # The account that must own the container, sent with every request. It travels with the location
    # so that the agent on the master, under the master's role, never has to ask.
    owner: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StorageLocation:
        """Also as records before 0.2 wrote it, when the container was called a bucket."""
        data = dict(data)
        if "bucket" in data:
            data.setdefault("container", data.pop("bucket"))
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    def cluster_key(self, cluster: str) -> str:
        return self.key(cluster)

    def run_key(self, cluster: str, run: str) -> str:
        return self.key(cluster, "runs", run)

    def where(self, cluster: str, run: str | None = None) -> str:
        """A cluster's (or one of its runs') place in the storage, for people."""
        inner = self.run_key(cluster, run) if run else self.cluster_key(cluster)
        root = self.url.removesuffix(f"/{self.prefix}") if self.prefix else self.url
        return f"{root.rstrip('/')}/{inner}" if self.container else str(Path(self.folder) / inner)


class Storage(Protocol):
    location: StorageLocation

    def put_file(self, path: Path, key: str) -> None: ...

    def put_text(self, key: str, text: str) -> None: ...

    def get_file(self, key: str, path: Path) -> None: ...

    def get_text(self, key: str) -> str | None: ...

    def objects(self, prefix: str) -> list[StoredObject]: ...

    def delete(self, keys: list[str]) -> None: ...

    def copy(self, source: str, target: str) -> None: ...

    def read_versioned(self, key: str) -> Versioned | None: ...

    def write_if(self, key: str, text: str, version: str | None) -> str:
        """Writes `text` only if the object is still at `version` (None: only if there is none), and
        returns the new version; otherwise raises StaleVersion."""
        ...
