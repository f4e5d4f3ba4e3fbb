"""A record of each cluster this machine saw removed, and why: by `down`, or by itself (idle, deadline).

Kept in $XEONCLUSTER_HOME/removed/NAME.json after the cluster's state folder is gone, so that a
second `down`, or `status`, `runs` and `up`, can say what happened instead of failing or searching
a cloud for a cluster that is no longer there. A new `up` of that name forgets the record.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.state import atomic_write, xeoncluster_home
from xeoncluster.cluster.untrusted import Timestamp
from xeoncluster.storage.base import Storage

REMOVED = "removed.json"


class Removal(BaseModel):
    cluster: str
    provider: str
    at: Timestamp
    by: str            # "down", "idle" or "deadline"
    detail: str = ""   # e.g. "after 60 idle minutes"
    config: dict[str, Any] = Field(default_factory=dict)  # what it was created with: its runs' storage

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.at))
        if self.by == "down":
            return f"cluster '{self.cluster}' ({self.provider}) was removed by `down` at {when}"
        return f"cluster '{self.cluster}' ({self.provider}) removed itself{f' {self.detail}' if self.detail else ''} " \
               f"at {when}"


def _path(name: str, home: Path | None = None) -> Path:
    return (home or xeoncluster_home()) / "removed" / f"{name}.json"


def record_removal(removal: Removal, home: Path | None = None) -> None:
    atomic_write(_path(removal.cluster, home), removal.model_dump_json(indent=2), 0o644)


def find_removal(name: str, home: Path | None = None) -> Removal | None:
    try:
        return Removal.model_validate_json(_path(name, home).read_text(errors="replace"))
    except (OSError, ValueError):
        return None


def forget_removal(name: str, home: Path | None = None) -> None:
    _path(name, home).unlink(missing_ok=True)


def store_removal(storage: Storage, removal: Removal) -> None:
    """Beside the cluster's runs in storage: a machine that did not see it go learns it there."""
    storage.put_text(storage.location.key(removal.cluster, REMOVED), removal.model_dump_json(indent=2))


def stored_removal(storage: Storage, cluster: str, since: float) -> Removal | None:
    """The cluster's removal of itself, if storage holds one newer than `since` (its creation). A master's
    role writes there: a record that names another cluster is refused. It is a claim, not a fact: the
    caller confirms it with the provider."""
    key = storage.location.key(cluster, REMOVED)
    try:
        text = storage.get_text(key)
        removal = Removal.model_validate_json(text) if text else None
    except ValueError:
        return None
    if removal is not None and removal.cluster != cluster:
        raise untrusted.refused(f"the removal record {key!r} in {storage.location.url}", "cluster", removal.cluster,
                                f"it is kept under '{cluster}'")
    return removal if removal is not None and removal.at >= since else None
