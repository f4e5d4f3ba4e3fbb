"""Which node is the cluster's master: one lease object in the cluster's storage.

The master is replaceable: a surviving node takes the place of one that vanished, and a master given a
spot notice hands over to a successor. Two nodes must never both act as master, so the lease is only
ever written conditionally (Storage.write_if): of two nodes that read the same lease and write their
own, one write lands and the other is refused. Its epoch grows at each change of holder, and each side
effect of a master is fenced by `holds`: the stored lease still names it, with the same epoch.

`renewed_at` is the writer's clock, compared with the reader's: `stale_after` must exceed the nodes'
clock skew by far. Time only decides when a lease may be taken, never who holds it: the stored lease does.
A lease renewed further in the future than the nodes' clocks can differ is stale: left to stand, it would
stop every take for as long as it claims, and any node's role (or one skewed clock) can write one.

A node's role may write to storage, so a lease read from it is checked like anything else read there
(cluster/untrusted.py), and one that fails is refused in one line naming where it was read.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.untrusted import Timestamp
from xeoncluster.storage.base import StaleVersion, Storage

NAME = "master-lease.json"
STALE_SECONDS = 180.0  # three of the watch agent's beats unrenewed: a lease nobody keeps is free to take
# The nodes' clocks are NTP-synced, well within a second of each other; a renewal further ahead than this
# came from a broken clock or a forger. It must stay far under STALE_SECONDS: it is how much longer than
# that a lease written ahead of time delays a take.
SKEW_SECONDS = 30.0
# Every provider's instance ids fit it; LeaseBook narrows it to the provider's own rule where given.
HOLDER = re.compile(r"[A-Za-z0-9._-]{1,64}")
LONGEST = 4096  # characters: an honest lease has under 200


class MasterLease(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True)

    epoch: int = Field(ge=1, le=untrusted.MOST_STEPS)
    holder: str       # the holder's instance id
    holder_name: str  # its node name
    renewed_at: Timestamp

    @field_validator("holder")
    @classmethod
    def _holder(cls, value: str) -> str:
        if not HOLDER.fullmatch(value):
            raise ValueError(f"not an instance id of the form {HOLDER.pattern}")
        return value

    @field_validator("holder_name")
    @classmethod
    def _holder_name(cls, value: str) -> str:
        if not untrusted.NODE_NAME.fullmatch(value):
            raise ValueError("not a node name")
        return value

    def same_term(self, other: MasterLease) -> bool:
        return self.epoch == other.epoch and self.holder == other.holder


def parse(data: str | dict[str, Any], source: str, rule: re.Pattern[str] = HOLDER) -> MasterLease:
    """A lease from its JSON (or its fields), or one line refusing it that names `source`."""
    if isinstance(data, str) and len(data) > LONGEST:
        raise untrusted.Refused(f"{source}: a master lease of {len(data)} characters: refused (too long)",
                                hint=untrusted.HINT)
    try:
        lease = MasterLease.model_validate_json(data) if isinstance(data, str) else MasterLease.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "the lease"
        given = repr(error.get("input"))
        why = " ".join(f"{field}: {error['msg']}, given {given[:80]}".split())
        raise untrusted.Refused(f"{source}: master lease refused ({why})", hint=untrusted.HINT) from None
    untrusted.instance_id(lease.holder, rule, source)
    return lease


def unheard(_line: str) -> None:
    """Where a LeaseBook made without a log says what it did."""


@dataclass(frozen=True)
class LeaseBook:
    """The lease of one cluster, in its storage. `id_rule`: the provider's instance ids; `note`: where a
    take says that it took a lease renewed in the future (the agent's log)."""

    storage: Storage
    cluster: str
    id_rule: re.Pattern[str] = HOLDER
    note: Callable[[str], None] = field(default=unheard, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.storage.location.cluster_key(self.cluster)}/{NAME}"

    @property
    def source(self) -> str:
        return f"{self.storage.location.where(self.cluster)}/{NAME}"

    def current(self) -> MasterLease | None:
        found = self._read()
        return found[0] if found else None

    def take(self, holder: str, holder_name: str, now: float, stale_after: float,
             force_from: str | None = None) -> MasterLease | None:
        """The lease for `holder`: made at epoch 1 when there is none, renewed when it is already
        ours, taken (epoch + 1) when it went unrenewed over `stale_after` seconds, was renewed more
        than SKEW_SECONDS in the future, or its holder is `force_from` (one the caller knows is gone).
        None when held by another, or the race is lost."""
        found = self._read()
        if found is None:
            return self._claim(self._lease(1, holder, holder_name, now), None)
        stored, version = found
        if stored.holder == holder:
            return self._claim(self._lease(stored.epoch, holder, holder_name, now), version)
        ahead = stored.renewed_at - now
        if ahead <= SKEW_SECONDS and now - stored.renewed_at <= stale_after and stored.holder != force_from:
            return None
        taken = self._claim(self._lease(stored.epoch + 1, holder, holder_name, now), version)
        if taken is not None and ahead > SKEW_SECONDS:
            self.note(f"{self.source}: the master lease was renewed {ahead:.0f} s in the future (by "
                      f"{stored.holder_name}, {stored.holder}): taken as stale")
        return taken

    def renew(self, lease: MasterLease, now: float) -> MasterLease:
        """Raises StaleVersion when `lease` is no longer the one stored (it was taken)."""
        version = self._version_of(lease)
        return self._write(self._lease(lease.epoch, lease.holder, lease.holder_name, now), version)

    def hand_over(self, lease: MasterLease, to_holder: str, to_name: str, now: float) -> MasterLease:
        """The holder of `lease` gives it to its successor, at the next epoch; StaleVersion if not its."""
        version = self._version_of(lease)
        return self._write(self._lease(lease.epoch + 1, to_holder, to_name, now), version)

    def holds(self, lease: MasterLease) -> bool:
        """The fence every side effect of a master passes first. A lease refused as forged holds nothing."""
        try:
            found = self.current()
        except untrusted.Refused:
            return False
        return found is not None and found.same_term(lease)

    def _lease(self, epoch: int, holder: str, holder_name: str, now: float) -> MasterLease:
        """Checked as a reader will check it: a lease nobody could read would stop every take."""
        return parse({"epoch": epoch, "holder": holder, "holder_name": holder_name, "renewed_at": float(now)},
                     "the new master lease", self.id_rule)

    def _read(self) -> tuple[MasterLease, str] | None:
        found = self.storage.read_versioned(self.key)
        return None if found is None else (parse(found.text, self.source, self.id_rule), found.version)

    def _version_of(self, lease: MasterLease) -> str:
        """The stored version, while `lease` is still the one in force."""
        found = self._read()
        if found is None or not found[0].same_term(lease):
            raise StaleVersion(f"{self.source}: {lease.holder_name} ({lease.holder}) no longer holds "
                               f"epoch {lease.epoch}")
        return found[1]

    def _claim(self, lease: MasterLease, version: str | None) -> MasterLease | None:
        """None when another write landed first."""
        try:
            return self._write(lease, version)
        except StaleVersion:
            return None

    def _write(self, lease: MasterLease, version: str | None) -> MasterLease:
        """A write whose answer was lost, sent again by the client, is refused for its own first copy:
        the stored lease is then exactly this one, and it stands."""
        try:
            self.storage.write_if(self.key, lease.model_dump_json(), version)
        except StaleVersion:
            if self.current() != lease:
                raise
        return lease
