"""Replace a node ahead of its loss: a spot notice comes about two minutes before the reclaim.

The replacement is launched (from the cluster's image, in the master's zone) and made ready while
the ranks keep training, under a new name so that both can exist at once. When it is ready, the
ranks are asked to stop at the next step boundary with a checkpoint; then the noticed node is
swapped out, and the resumed job runs on the replacement. Its boot is not on the critical path.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from xeoncluster.agent.recovery import restore_checkpoint
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.playbook import load_playbooks
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.operations.launch_ceiling import check_ceiling
from xeoncluster.operations.repair import recorded_base, recorded_image, remove_new
from xeoncluster.operations.up_nodes import add_nodes, check_mesh, playbook_runner, write_cluster_files
from xeoncluster.providers.base import LaunchRequest, Node
from xeoncluster.providers.node_kinds import Role
from xeoncluster.remote.shell import NodeShell


class Readying(Protocol):
    """What the recovery waits for when a noticed node ends: a Replacement, or none to be had in time
    (agent/short_notice.py). `error`: why a replacement failed to launch."""

    old: Node
    new: Node | None
    error: str

    def wait(self) -> Node | None: ...


class Replacement:
    """Launches and prepares one replacement in a thread; `wait()` returns it, or None if that failed."""

    def __init__(self, ctx: CommandContext, record: ClusterRecord, old: Node,
                 warm: Callable[[Node], None], on_ready: Callable[[Node], None],
                 on_failed: Callable[[str], None] = lambda _why: None) -> None:
        self.ctx, self.record, self.old = ctx, record, old
        self.warm, self.on_ready, self.on_failed = warm, on_ready, on_failed
        self.new: Node | None = None
        self.error: str = ""
        self._thread = threading.Thread(target=self._run, name=f"xc-replace-{old.name}", daemon=True)

    def start(self) -> Replacement:
        self._thread.start()
        return self

    def wait(self) -> Node | None:
        self._thread.join()
        return self.new

    def _run(self) -> None:
        shell = self.ctx.shell()
        try:
            self.new = self._launch(shell)
            self.on_ready(self.new)
        except Exception as exc:  # noqa: BLE001 - any failure here means recovering the usual way once the node is gone
            self.error = str(getattr(exc, "message", exc))
            self.ctx.reporter.warn(f"could not replace {self.old.name} ahead of its loss: {self.error}")
            self.on_failed(self.error)
        finally:
            shell.close()

    def _launch(self, shell: NodeShell) -> Node:
        ctx, record = self.ctx, self.record
        index = max(n.index for n in record.node_list()) + 1
        master = record.node_list()[0]
        with ctx.reporter.step(f"launch node{index} to replace {self.old.name} ahead of its loss"):
            check_ceiling(ctx, record, 1, replacing=1)
            [new] = ctx.provider.launch(LaunchRequest(ctx.config, 1, recorded_image(record), Role.WORKER, index,
                                                      near=master, base=recorded_base(record), replacement=True))
            try:
                add_nodes(ctx, record, [new], shell, trust_first_use=False)
            except Exception:
                remove_new(ctx, record, [new.name])  # a node nobody logs in to is of no use, and it bills
                raise
            if recorded_image(record) is None:
                playbook_runner(ctx, shell).run_all(load_playbooks(), [new], ctx.reporter.detail)
            self.warm(new)
        return new


def swap_in(ctx: CommandContext, record: ClusterRecord, shell: NodeShell, old: Node, new: Node, run_dir: str,
            remove: Callable[[Node], None]) -> int | None:
    """After the ranks stopped: drop the noticed node, rewrite the master's files for the new set of
    nodes, check reach, and give the replacement the newest checkpoint. Returns its step."""
    record.set_nodes([n for n in record.node_list() if n.name != old.name])
    record.replaced = sorted(set(record.replaced) | {new.name})
    ctx.state.save(record)
    ctx.state.forget_host(old.name)
    remove(old)
    nodes = record.node_list()
    with ctx.reporter.step(f"swap {old.name} for {new.name}"):
        write_cluster_files(ctx, nodes, shell)
        check_mesh(ctx, nodes, shell)
        return restore_checkpoint(ctx, shell, nodes, run_dir)
