"""`up`'s hold on the cluster's queue while it repairs the cluster: no queued run starts meanwhile.

The hold is a lease on the agent's host (agent/repair_lease.py says why not a lock held over SSH):
taken before the repair looks for an active run, renewed every RENEW_SECONDS while it works, ended
when it is done. A laptop that crashed or went offline stops renewing, and the queue goes on at most
LEASE_SECONDS later.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import BusyError, RemoteError
from xeoncluster.runs import client
from xeoncluster.runs.host import AgentHost
from xeoncluster.wire.contract import QUEUE_HELD_ELSEWHERE

LEASE_SECONDS = 300.0
RENEW_SECONDS = 60.0


@contextmanager
def queue_held(ctx: CommandContext, record: ClusterRecord) -> Iterator[None]:
    """Hold the queue for the block. A master that does not answer holds no queue: its agent, and every
    queued run's, is gone with it, and the repair replaces it."""
    shell = ctx.shell()
    try:
        try:
            host = client.host_for(ctx, shell, record)
        except RemoteError:
            yield
            return
        client.install(ctx, shell, host, record)  # the `hold` of this CLI's agent code
        holder = f"up-{uuid.uuid4().hex[:12]}"
        _hold(host, ctx.config.name, holder)
        try:
            with _renewing(ctx, record, holder):
                yield
        finally:  # after the last renewal, which must not write the lease again
            _release(host, ctx.config.name, holder)
    finally:
        shell.close()


def _hold(host: AgentHost, cluster: str, holder: str) -> None:
    result = host.call(["hold", cluster, holder, str(LEASE_SECONDS)])
    if result.exit_code == QUEUE_HELD_ELSEWHERE:
        raise BusyError(f"cluster '{cluster}' is being repaired by another `up` (it holds the run queue)",
                        hint=f"wait for it; a hold that is not renewed ends within {LEASE_SECONDS:.0f}s")
    if not result.ok:
        raise RemoteError(f"could not hold the run queue of cluster '{cluster}' on {host.name} for the repair: "
                          f"{result.last_line()}")


def _release(host: AgentHost, cluster: str, holder: str) -> None:
    """Best effort: a hold left behind runs out by itself, and must not hide why the block ended."""
    with suppress(RemoteError):
        host.call(["release", cluster, holder])


@contextmanager
def _renewing(ctx: CommandContext, record: ClusterRecord, holder: str) -> Iterator[None]:
    """Renew the lease from a thread with its own connection while the block runs."""
    done = threading.Event()

    def renew() -> None:
        shell = ctx.shell()
        try:
            host = client.host_for(ctx, shell, record)
            while not done.wait(RENEW_SECONDS):
                _hold(host, ctx.config.name, holder)
        except (BusyError, RemoteError) as exc:
            ctx.reporter.warn(f"the repair's hold on the run queue could not be renewed: {exc.one_line()}")
        finally:
            shell.close()

    thread = threading.Thread(target=renew, name="queue-hold", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
