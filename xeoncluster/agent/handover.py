"""A master with a spot notice hands its job over before it goes.

On the master's notice its run agent launches a successor under the master's name and role, from the
cluster's image, in its zone, and readies it while the ranks train on: the host key pinned, the agent's
code, the node package and the run's data. The key is the one the provider shows out of band (on AWS, the
console, polled for a while); where that shows none in time, the successor is not trusted on first use and
the handover fails (operations/up_nodes.host_key). Only on a provider with no out-of-band source is the
successor's key scanned. A successor that could not be readied is unpinned and removed again.

Once it is ready the ranks are asked to stop at the next step boundary with a checkpoint (as for a noticed
worker, agent/proactive.py). Then, with the queue here held so that no queued run starts on the old master,
the checkpoint is stored, the cluster's state names the successor, and the successor gets the agent's job
(agent/new_master.py): every run, the watch agent and the master lease. The old master then powers itself
off. A failed handover leaves the ranks training to near the notice's deadline, where they stop by
themselves with a checkpoint, and the run to the workers' takeover (agent/takeover.py).
"""
from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from xeoncluster.agent.new_master import NewMaster
from xeoncluster.agent.queue import Queue
from xeoncluster.agent.run_storage import DRAIN_SECONDS
from xeoncluster.agent.succession import Fenced
from xeoncluster.cluster import cluster_files
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.master_lease import STALE_SECONDS, LeaseBook
from xeoncluster.cluster.playbook import load_playbooks
from xeoncluster.cluster.state import ClusterRecord, atomic_write
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.core.paths import master_files, package_dir
from xeoncluster.operations.launch_ceiling import check_ceiling
from xeoncluster.operations.repair import recorded_base, recorded_image
from xeoncluster.operations.up_nodes import check_mesh, host_key, playbook_runner, write_cluster_files
from xeoncluster.providers.abilities import remove_node
from xeoncluster.providers.base import LaunchRequest, Node
from xeoncluster.providers.node_kinds import Role
from xeoncluster.providers.registry import spec_for
from xeoncluster.remote.package_sync import sync_tree, tree_digest
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs import watch_client
from xeoncluster.runs.host import LocalHost
from xeoncluster.runs.record import RunFiles
from xeoncluster.wire.layout import APP

HOLDER = "handover"


class Handover:
    """Launches and readies the successor in a thread; `ready` once it can take over."""

    def __init__(self, ctx: CommandContext, record: ClusterRecord, warm: Callable[[Node], None],
                 on_ready: Callable[[Node], None]) -> None:
        self.ctx, self.record, self.warm, self.on_ready = ctx, record, warm, on_ready
        self.old: Node = record.node_list()[0]
        self.new: Node | None = None
        self.key = ""
        self._thread = threading.Thread(target=self._run, name="xc-handover", daemon=True)

    def start(self) -> Handover:
        self._thread.start()
        return self

    @property
    def ready(self) -> bool:
        return not self._thread.is_alive() and self.new is not None

    def _run(self) -> None:
        shell = self.ctx.shell()
        try:
            new = self._launch(shell)
            self.new = new
            self.on_ready(new)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the run to its deadline and the takeover
            self.new = None
            self.ctx.reporter.warn(f"could not ready a successor to {self.old.name} ahead of its loss: "
                                   f"{getattr(exc, 'message', exc)}")
        finally:
            shell.close()

    def _launch(self, shell: NodeShell) -> Node:
        ctx, record = self.ctx, self.record
        with ctx.reporter.step(f"launch a successor to {self.old.name} (the master) ahead of its loss"):
            check_ceiling(ctx, record, 1, replacing=1)
            [new] = ctx.provider.launch(LaunchRequest(ctx.config, 1, recorded_image(record), Role.MASTER,
                                                      self.old.index, near=self.old, base=recorded_base(record),
                                                      replacement=True))
            record.add_resources("nodes", [new.id])
            ctx.state.save(record)
            try:
                self._ready(shell, new)
            except Exception:
                self._remove(new)
                raise
        return new

    def _ready(self, shell: NodeShell, new: Node) -> None:
        ctx = self.ctx
        shell.wait_ready([new], ctx.config.ssh.timeout)
        self.key = host_key(ctx, shell, new, trust_first_use=False)
        self.pin(new)
        shell.wait_login([new], ctx.config.ssh.timeout, ctx.reporter.detail)
        if recorded_image(self.record) is None:
            playbook_runner(ctx, shell).run_all(load_playbooks(), [new], ctx.reporter.detail)
        root = package_dir().parent
        sync_tree(shell, [new], root, master_files(), f"{APP.split('/', 1)[1]}/{tree_digest(root, master_files())}")
        self.warm(new)

    def _remove(self, new: Node) -> None:
        """A successor that is not ready is never used: left running, it would bill with nobody to end it."""
        if self.key:
            self._unpin(new)
        try:
            remove_node(self.ctx.provider, self.ctx.config, new)
        except Exception as exc:  # noqa: BLE001 - the readying's failure is the one to tell; `down` finds it by tag
            self.ctx.reporter.warn(f"could not remove {new.name} ({new.id}), the successor that was not ready: "
                                   f"{getattr(exc, 'message', exc)}")
            return
        self.record.drop_resources("nodes", [new.id])
        self.ctx.state.save(self.record)

    def _unpin(self, new: Node) -> None:
        """The successor's pin has the master's name: only its address tells the two apart."""
        known_hosts = self.ctx.state.known_hosts
        if known_hosts.exists():
            kept = [line for line in known_hosts.read_text().splitlines()
                    if line.partition(" ")[0].split(",")[:2] != [new.name, new.ssh_host]]
            atomic_write(known_hosts, "".join(f"{line}\n" for line in kept))

    def pin(self, new: Node, only_these: list[Node] | None = None) -> None:
        """The successor's key beside the nodes' pins: it has the master's name, and a pin is found by address
        (`only_these`: the nodes whose pins stay, once the old master is out)."""
        known = cluster_files.read_known(self.ctx.state)
        nodes = self.ctx.state.load()
        kept = [(n, known[n.name]) for n in (only_these if only_these is not None else
                                              nodes.node_list() if nodes else []) if n.name in known]
        atomic_write(self.ctx.state.known_hosts, cluster_files.known_hosts([*kept, (new, self.key)]))


def hand_over(ctx: CommandContext, handover: Handover, files: RunFiles, drain: Callable[[float], bool],
              note: Callable[[str], None]) -> None:
    """After the ranks stopped: hold the queue here, store the checkpoint, make the successor the master
    and give it the agent's job, then power this machine off."""
    new = handover.new
    assert new is not None
    stopped_at = time.time()
    Queue(files.path.parent).hold(HOLDER, 3600.0)
    # This master's watch agent would go on beating and copying what is no longer the cluster's truth.
    watch_client.stop_watcher(LocalHost(str(ctx.state.home), sys.executable), ctx.config.name)
    if not drain(DRAIN_SECONDS):
        note("not everything of the run reached storage before the handover; it resumes from the newest "
             "checkpoint that did")
    record = ctx.require_up()
    workers = [n for n in record.node_list() if n.id != handover.old.id and not n.is_master]
    handover.pin(new, only_these=workers)
    record.set_nodes([new, *workers])
    record.replaced = sorted(set(record.replaced) | {new.name})
    ctx.state.save(record)
    location = record.storage
    if location is None:
        raise XeonClusterError("the cluster keeps no storage: the run cannot move to a new master")
    storage = ctx.provider.open_storage(location)
    book = LeaseBook(storage, record.name, spec_for(ctx.config.provider).instance_id, note)
    lease = book.take(handover.old.id, handover.old.name, time.time(), STALE_SECONDS)
    if lease is None:
        raise Fenced("another node holds the master lease: this master hands nothing over")
    shell = ctx.shell()
    try:
        write_cluster_files(ctx, record.node_list(), shell)
        check_mesh(ctx, record.node_list(), shell)
        why = f"{handover.old.name} got a spot notice; handed over to a new {new.name}"
        NewMaster(ctx, record, storage, why, stopped_at).hand_over(shell, book, lease)
    finally:
        shell.close()
    note(f"{new.name} ({new.id}) is the master now; this one ({handover.old.id}) powers off")
    power_off(ctx)


def power_off(ctx: CommandContext) -> None:
    command = spec_for(ctx.config.provider).poweroff
    if command:
        subprocess.run(shlex.split(command), check=False)
