"""How an idle (or expired) cluster removes itself, from its watch agent.

First what must outlive it: at a deadline (max_hours, or the max_cost ceiling) the active run is
cancelled, which saves a checkpoint that its agent stores with the run's log before it ends; then the
removal itself is written to storage, where any machine's next `status`, `runs` or `up` finds it. Then
the instances go, found by the cluster's tag: the workers, then the master. On a cloud the agent runs on
the master and uses its role, which may terminate this cluster's instances only; the security group, key
pair and role stay for the user's next `down` or `up`. For nodes on this machine the agent here removes
everything, as `down` does, and records the removal where `down` records its own.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.removals import Removal, store_removal
from xeoncluster.operations import down
from xeoncluster.providers.abilities import AgentOnMaster, remove_node
from xeoncluster.runs import client
from xeoncluster.runs.host import AgentHost

# What removes the cluster whatever runs: its active run is stopped with a checkpoint first.
STOPS_RUNS = ("deadline", "cost")
# A cancelled run checkpoints, stops and stores its checkpoint before the nodes go: how long to wait for it.
CANCEL_WAIT_SECONDS = 900.0


class SelfRemoval:
    def __init__(self, ctx: CommandContext, host: AgentHost, report: Callable[[str], None]) -> None:
        self.ctx, self.host, self.report = ctx, host, report

    def remove(self, by: str, detail: str) -> Removal:
        if isinstance(self.ctx.provider, AgentOnMaster):
            return self._remove(by, detail)
        # Here the CLI's commands hold the same lock: a `train` being submitted puts the removal off.
        with self.ctx.state.lock(f"the {by} removal of the cluster"):
            return self._remove(by, detail)

    def _remove(self, by: str, detail: str) -> Removal:
        record = self.ctx.state.load()
        self.report(f"removing the cluster {detail}")
        if by in STOPS_RUNS:
            never = self._stop_runs()
            detail += f"; queued runs that never started: {', '.join(never)}" if never else ""
        removal = Removal(cluster=self.ctx.config.name, provider=self.ctx.config.provider, at=time.time(), by=by,
                          detail=detail, config=record.config if record else {})
        if record is not None and record.storage is not None:
            try:
                store_removal(self.ctx.provider.open_storage(record.storage), removal)
            except Exception as exc:  # noqa: BLE001 - the cluster must go even when storage does not answer
                self.report(f"could not record the removal in {record.storage.url} ({type(exc).__name__}: {exc})")
        if isinstance(self.ctx.provider, AgentOnMaster):
            self._terminate_instances()
        else:
            down.remove_cluster(self.ctx, by=by, detail=detail)
        return removal

    def _stop_runs(self) -> list[str]:
        """The queue emptied (those runs never start; their names are returned), then the active run
        cancelled with a checkpoint."""
        pending = client.line(self.host, self.ctx.config.name)
        queued = [r.run for r in pending if r.waiting]
        for run in queued:
            client.request_cancel(self.host, self.ctx.config.name, run)
        if queued:
            self.report(f"queued runs that never started: {', '.join(queued)}")
        active = next((r for r in pending if not r.waiting), None)
        if active is not None:
            self._stop(active.run)
        return queued

    def _stop(self, run: str) -> None:
        self.report(f"cancelling run {run}: a checkpoint first, stored before the nodes go")
        client.request_cancel(self.host, self.ctx.config.name, run)
        deadline = time.monotonic() + CANCEL_WAIT_SECONDS
        while time.monotonic() < deadline:
            current = client.read_record(self.host, self.ctx.config.name, run)
            if current is None or current.state.finished or not client.agent_alive(self.host, current):
                return
            time.sleep(2.0)
        self.report(f"run {run} did not stop within {CANCEL_WAIT_SECONDS:.0f}s; removing the cluster anyway")

    def _terminate_instances(self) -> None:
        nodes = self.ctx.provider.nodes(self.ctx.config, priced=False)
        workers = [n for n in nodes if not n.is_master]
        with ThreadPoolExecutor(max_workers=8) as pool:
            for removed in pool.map(lambda node: remove_node(self.ctx.provider, self.ctx.config, node), workers):
                self.report(f"terminated {', '.join(removed.items.get('instances', [])) or 'nothing (already gone)'}")
        for master in (n for n in nodes if n.is_master):
            self.report(f"terminating the master {master.id}, where this agent runs")
            remove_node(self.ctx.provider, self.ctx.config, master)
