"""Whether a cluster removed itself (idle, or at its deadline), as this machine's `status`, `runs` and
`up` learn it: for local nodes from this machine's removal records; for a cloud cluster, whose state is
still here, from the record its watch agent left in storage before the instances went."""
from __future__ import annotations

from xeoncluster.context import CommandContext
from xeoncluster.removals import Removal, find_removal, stored_removal
from xeoncluster.state import ClusterRecord


def removed_itself(ctx: CommandContext, record: ClusterRecord | None) -> Removal | None:
    if record is None:
        found = find_removal(ctx.config.name)
        return found if found is not None and found.by != "down" else None
    if record.storage is None:
        return None
    try:
        return stored_removal(ctx.provider.open_storage(record.storage), ctx.config.name, record.created_at)
    except Exception:  # noqa: BLE001 - storage that does not answer only loses this explanation
        return None


def removed(ctx: CommandContext, record: ClusterRecord | None) -> Removal | None:
    """As `removed_itself`, and without state also a removal by `down`: `status` says either."""
    return find_removal(ctx.config.name) if record is None else removed_itself(ctx, record)


def what_remains(ctx: CommandContext, removal: Removal, record: ClusterRecord | None) -> str:
    """The removal, and the way on from it."""
    name = ctx.config.name
    if record is None:
        return f"{removal.describe()}; `xeoncluster up --name {name}` starts it again"
    return (f"{removal.describe()}; what its master could not remove (security group, key pair, role) goes "
            f"with `xeoncluster down --name {name}`, or `xeoncluster up --name {name}` starts it again")
