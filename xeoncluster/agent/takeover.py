"""`python -m xeoncluster.agent takeover CLUSTER NODE`: a worker takes the place of a master that is gone.

The worker's orphan watch starts it when the master's heartbeats stop (node/orphan_watch.py). It runs
from the copy of the agent's folder the master's watch agent keeps on every worker (agent/replica.py),
with the tag-scoped role every node holds, and:

1. stops unless the provider confirms the master gone and its ssh port does not answer (a master that
   runs but is silent, its beats only late, is not replaced from here: two masters would both act, and
   the ranks it runs would be ended);
2. takes the master lease in storage (cluster/master_lease.py) from the lost master; a worker that loses
   that race stands by, and its heartbeat counts as heard: another node is taking over;
3. replaces the master under its name from the cluster's image (operations/repair.py, as `up` does);
4. installs the agent there with the cluster's state and every unfinished run, a running one set to
   resume from its newest checkpoint in storage, starts the watch agent and the runs' agents, and hands
   the lease to the new master. The lease is checked before each of these: a taker that lost it stops.
"""
from __future__ import annotations

import shlex
import time
from pathlib import Path

from xeoncluster.agent.new_master import NewMaster
from xeoncluster.agent.stall import ranks_pattern
from xeoncluster.agent.succession import Fenced
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.master_lease import STALE_SECONDS, LeaseBook, MasterLease
from xeoncluster.cluster.state import ClusterRecord, ClusterStatus
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.operations.repair import repair
from xeoncluster.providers.node_kinds import Node
from xeoncluster.providers.registry import spec_for
from xeoncluster.remote.shell import NodeShell, port_open
from xeoncluster.runs.submission import Submission
from xeoncluster.storage.base import Storage
from xeoncluster.wire.layout import PACKAGE_ROOT, RemoteLayout, RunFolder

HEARTBEAT = Path.home() / PACKAGE_ROOT / "orphan" / "heartbeat"
# A reclaimed instance is off well before the takeover's 150 s of silence; a live one answers at once.
ANSWER_SECONDS = 5.0


class Takeover:
    def __init__(self, ctx: CommandContext, record: ClusterRecord, me: Node, storage: Storage) -> None:
        self.ctx, self.record, self.me = ctx, record, me
        self.book = LeaseBook(storage, record.name, spec_for(ctx.config.provider).instance_id, ctx.reporter.warn)
        self.storage = storage
        self.began = time.time()

    def run(self, shell: NodeShell) -> int:
        old = self.record.master
        if old is None or not self._gone(old):
            self.ctx.reporter.info("the master runs: nothing to take over")
            return 0
        if port_open(old.ssh_host, self.ctx.identity().port, ANSWER_SECONDS):
            self.ctx.reporter.info(f"{old.name} ({old.ssh_host}) still answers on its ssh port: nothing to take over")
            return 0
        lease = self.book.take(self.me.id, self.me.name, time.time(), STALE_SECONDS, force_from=old.id)
        if lease is None:
            HEARTBEAT.touch(exist_ok=True)
            self.ctx.reporter.info("another node holds the master lease: standing by")
            return 0
        self.ctx.reporter.info(f"{old.name} ({old.id}) is gone: {self.me.name} takes over (lease epoch {lease.epoch})")
        self._check(lease)
        self._end_orphaned_ranks(shell, [n for n in self.record.node_list() if n.id != old.id])
        repair(self.ctx, self.record, shell, [old], len(self.record.nodes), trust_first_use=False)
        lease = self._check(lease)
        why = f"{old.name} was lost with no notice; {self.me.name} took over"
        NewMaster(self.ctx, self.record, self.storage, why, self.began).hand_over(shell, self.book, lease)
        HEARTBEAT.touch(exist_ok=True)
        new = self.record.master
        self.ctx.reporter.info(f"{new.name} ({new.id}) is the master now" if new else "no new master")
        return 0

    def _end_orphaned_ranks(self, shell: NodeShell, survivors: list[Node]) -> None:
        """The lost master's launcher took the job's ranks with it; those left on the survivors wait for
        peers that are gone. They end before the relaunch, as a stalled job's do."""
        for record in NewMaster(self.ctx, self.record, self.storage, "").unfinished():
            plan = Submission.from_json((self.ctx.state.runs / record.run / RunFolder.REQUEST).read_text()).plan
            pattern = ranks_pattern(RemoteLayout(plan.home).run_dir(plan.run))
            shell.run(survivors, f"pkill -KILL -f -- {shlex.quote(pattern)}; pkill -KILL -x hydra_pmi_proxy; true")

    def _gone(self, master: Node) -> bool:
        listed = {n.id: n for n in self.ctx.provider.nodes(self.ctx.config, priced=False)}
        current = listed.get(master.id)
        return current is None or not current.state.is_live()

    def _check(self, lease: MasterLease) -> MasterLease:
        if not self.book.holds(lease):
            raise Fenced(f"{self.me.name} lost the master lease (epoch {lease.epoch}) to another node")
        return self.book.renew(lease, time.time())


def takeover(ctx: CommandContext, me_name: str) -> int:
    # The copy's status may be `up`'s before it finished (the first beat comes from its last step): the
    # nodes it names are what counts here.
    record = ctx.state.load()
    if record is None or record.master is None:
        raise XeonClusterError(f"no copy of cluster {ctx.config.name}'s state names its master here")
    record.status = ClusterStatus.READY
    me = record.node(me_name)
    if me is None or me.is_master:
        raise XeonClusterError(f"{me_name} is not a worker of cluster {record.name}")
    if record.storage is None:
        raise XeonClusterError(f"cluster {record.name} keeps no storage: no lease can say who takes over")
    storage = ctx.provider.open_storage(record.storage)
    shell = ctx.shell()
    try:
        return Takeover(ctx, record, me, storage).run(shell)
    finally:
        shell.close()
