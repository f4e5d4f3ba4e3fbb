"""Whether a cluster removed itself (idle, or at its deadline), as this machine's `status`, `runs` and
`up` learn it: for local nodes from this machine's removal records; for a cloud cluster, whose state is
still here, from the record its watch agent left in storage before the instances went."""
from __future__ import annotations

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.removals import Removal, find_removal, stored_removal
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import XeonClusterError


def removed_itself(ctx: CommandContext, record: ClusterRecord | None) -> Removal | None:
    if record is None:
        found = find_removal(ctx.config.name)
        return found if found is not None and found.by != "down" else None
    if record.storage is None:
        return None
    try:
        found = stored_removal(ctx.provider.open_storage(record.storage), ctx.config.name, record.created_at)
    except untrusted.Refused as exc:
        ctx.reporter.warn(f"{exc.message}; ignored")
        return None
    except Exception:  # noqa: BLE001 - storage that does not answer only loses this explanation
        return None
    return found if found is None else confirmed(ctx, found)


def confirmed(ctx: CommandContext, removal: Removal) -> Removal | None:
    """A removal read from storage, once the provider lists no node of the cluster. The master's role can
    write that record; believing it of a live cluster would make `up` build it again beside itself."""
    claim = f"storage says cluster '{ctx.config.name}' removed itself"  # not its words: the master wrote them
    try:
        live = ctx.provider.nodes(ctx.config, priced=False)
    except XeonClusterError as exc:
        ctx.reporter.warn(f"{claim}, and {ctx.config.provider} could not confirm it ({exc.message}); "
                          "the record is ignored")
        return None
    if live:
        ctx.reporter.warn(f"{claim}, but {ctx.config.provider} still lists {len(live)} live node(s) of it; "
                          "the record is ignored")
        return None
    return removal


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
