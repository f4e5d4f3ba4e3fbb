"""`xeoncluster up`: ordered, named steps; each records what it created in state.json before the next.

Steps: prepare (key, network), image (the ImagePlan that `plan` shows), launch master, configure
(playbooks), bake, launch workers, write the master's ssh config and hostfile, check the master
reaches every node. With the image ready, master and workers launch together; with image_strategy
parallel, every node is configured at once and the image is baked in the background. A failure or
Ctrl-C rolls back what this run created (up_rollback.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TypeVar

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.image import ImageAction, ImagePlan, decide_image
from xeoncluster.cluster.master_lease import LeaseBook
from xeoncluster.cluster.playbook import load_playbooks
from xeoncluster.cluster.removals import forget_removal
from xeoncluster.cluster.state import ClusterRecord, ClusterStatus, ImageRecord
from xeoncluster.commands.self_removed import removed_itself
from xeoncluster.commands.up.bake_lock import BakeLock
from xeoncluster.commands.up.up_again import UpResult, already_up
from xeoncluster.commands.up.up_image import settle
from xeoncluster.commands.up.up_rollback import rollback
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.core.stacks import get_stack
from xeoncluster.operations.up_nodes import (
    GROW_ROOT_FS,
    IMAGE_PREPARE,
    IMAGE_RESTORE,
    add_nodes,
    check_mesh,
    playbook_runner,
    run_on_master,
    write_cluster_files,
)
from xeoncluster.providers.abilities import (
    AgentOnMaster,
    HasOwners,
    LaunchesTogether,
    SizesDisks,
    bake_root_gib,
    remove_node,
    require_prices,
    root_gib,
    start_bake,
)
from xeoncluster.providers.base import Image, LaunchRequest, Network, Node
from xeoncluster.providers.node_kinds import Role
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.watch_client import keep_watch

Step = tuple[str, Callable[[], None]]
T = TypeVar("T")


def run(ctx: CommandContext, keep_on_failure: bool = False) -> UpResult:
    if ctx.config.max_cost:
        require_prices(ctx.provider, "max_cost (--max-cost)")
    with ctx.state.lock("up"):
        existing = ctx.state.load()
        gone = removed_itself(ctx, existing)
        if existing is not None and existing.ready and gone is None:
            return already_up(ctx, existing)
        if gone is not None:
            ctx.reporter.info(f"{gone.describe()}; starting it again")
        notes = ctx.provider.preflight(ctx.config)
        # Bad storage stops `up` before anything is made; the `auto` bucket itself is made by a step.
        ctx.provider.storage_location(ctx.config, ctx.config.storage.url, ctx.state.home / "storage", create=False)
        if existing is None:
            _refuse_orphans(ctx)
        image = decide_image(ctx.config, ctx.provider, get_stack(ctx.config.stack))
        bake_lock = BakeLock(ctx.provider.name, image.key or "")
        try:
            image = _claim_bake(ctx, image, bake_lock)
            if existing is not None:
                _clean_leftovers(ctx)
            return _create(ctx, notes, image, keep_on_failure, bake_lock)
        finally:
            bake_lock.release()


def _claim_bake(ctx: CommandContext, image: ImagePlan, lock: BakeLock) -> ImagePlan:
    """Only one `up` bakes a key at a time; one that waited decides again and reuses the other's image."""
    if image.action is not ImageAction.BAKE or image.key is None:
        return image
    lock.acquire(ctx.reporter.info)
    again = settle(ctx, decide_image(ctx.config, ctx.provider, get_stack(ctx.config.stack)))
    if again.action is not ImageAction.BAKE:
        lock.release()
    return again


def _refuse_orphans(ctx: CommandContext) -> None:
    """Nodes of this name without local state (deleted folder, other machine): launching would clash."""
    orphans = ctx.provider.nodes(ctx.config)
    if orphans:
        raise XeonClusterError(
            f"cluster '{ctx.config.name}' already has {len(orphans)} node(s) "
            f"({', '.join(n.name for n in orphans)}) but no local state",
            hint=f"run `xeoncluster down --name {ctx.config.name}` (it finds them by name/tag), then up again")


def _clean_leftovers(ctx: CommandContext) -> None:
    with ctx.reporter.step("removing leftovers of an earlier, unfinished up"):
        ctx.provider.terminate(ctx.config)
    # The pins belong to the machines just removed; the new nodes present new host keys.
    ctx.state.forget_hosts()


def _create(ctx: CommandContext, notes: list[str], image: ImagePlan, keep_on_failure: bool,
            bake_lock: BakeLock) -> UpResult:
    cfg, state, reporter = ctx.config, ctx.state, ctx.reporter
    record = ClusterRecord(name=cfg.name, provider=cfg.provider, config=cfg.model_dump(mode="json"),
                           owner=ctx.provider.owner() if isinstance(ctx.provider, HasOwners) else None)
    state.save(record)
    forget_removal(cfg.name)  # the name is in use again
    reporter.attach_log(state.new_log("up"))
    for note in notes:
        reporter.warn(note) if note.lower().startswith("warning") else reporter.info(note)
    started = time.monotonic()
    current = "start"
    shell = ctx.shell()
    steps = UpSteps(ctx, record, image, shell, bake_lock)
    try:
        for current, action in steps.sequence():
            with reporter.step(current):
                action()
            record.steps_done.append(current)
            state.save(record)
    except (Exception, KeyboardInterrupt) as exc:
        raise rollback(ctx, current, exc, keep_on_failure) from exc
    finally:
        shell.close()
    record.status = ClusterStatus.READY
    state.save(record)
    return UpResult(cfg.name, record.node_list(), steps.image, seconds=time.monotonic() - started,
                    autostop=steps.autostop)


class UpSteps:
    """The steps of one `up`, sharing what earlier steps produced (the network, the image)."""

    def __init__(self, ctx: CommandContext, record: ClusterRecord, image: ImagePlan, shell: NodeShell,
                 bake_lock: BakeLock) -> None:
        self.ctx, self.record, self.image, self.shell = ctx, record, image, shell
        self.bake_lock = bake_lock
        self.network: Network | None = None
        self.configure_seconds: float | None = None
        self.autostop = ""

    def sequence(self) -> list[Step]:
        nodes = self.ctx.config.nodes
        steps: list[Step] = [("prepare: key, network", self.prepare),
                             (f"image: {self.image.action.value}", self.use_image),
                             ("launch master", self.launch_master)]
        steps.insert(1, ("run storage", self.run_storage))
        if isinstance(self.ctx.provider, AgentOnMaster):
            steps.insert(2, ("the master's role for its run agent", self.agent_access))
        workers = [(f"launch {nodes - 1} worker(s)", self.launch_workers)] if nodes > 1 else []
        if self._launch_together():
            steps[-1] = (f"launch master and {nodes - 1} worker(s)", self.launch_all)
            workers = []
        grow = [(f"grow the master's disk to {root_gib(self.ctx.provider, self.ctx.config)} GiB", self.grow_master)] \
            if self._grown_root() else []
        if self._in_background():
            # Every node starts from the base and is configured at once; the image is only for later ups.
            steps += [*workers, ("configure nodes (playbooks)", self.configure),
                      ("start baking the image in the background", self.bake_in_background), *grow]
        elif self.image.action is ImageAction.NONE:
            steps += [*workers, ("configure nodes (playbooks)", self.configure)]
        else:
            steps += [("configure nodes (playbooks)", self.configure)] if self.image.runs_playbooks else []
            steps += [("bake image", self.bake), *grow] if self.image.action is ImageAction.BAKE else []
            steps += workers
        steps.append(("write ssh config and hostfile on the master", self.write_files))
        # Itself included: this proves the key, config and pinned keys written on the master work,
        # which matters even on one node (Hydra falls back to ssh when it can't tell a host is local).
        steps.append(("check the master reaches every node by name", self.check_reach))
        steps.append(("start the watch agent (removes the cluster when idle)", self.watch))
        return steps

    def _launch_together(self) -> bool:
        """No playbook runs between the master's launch and the workers' (the image is ready, or every
        node is configured at once): they boot at the same time, where the provider can."""
        ready = self.image.action in (ImageAction.REUSE, ImageAction.GIVEN, ImageAction.NONE) or self._in_background()
        return self.ctx.config.nodes > 1 and ready and isinstance(self.ctx.provider, LaunchesTogether) \
            and self.ctx.provider.launches_together(self.ctx.config)

    def _in_background(self) -> bool:
        """image_strategy: parallel, where the cloud can finish an image while the node works on."""
        return self.image.action is ImageAction.BAKE and self.image.in_background

    def prepare(self) -> None:
        self.ctx.state.ensure_key()
        prepared = self.ctx.provider.prepare(self.ctx.config, self.ctx.state.public_key())
        for kind, ids in prepared.created.items():
            self.record.add_resources(kind, ids)
        self.network = prepared.network

    def run_storage(self) -> None:
        cfg = self.ctx.config
        self.record.storage = self.ctx.provider.storage_location(cfg, cfg.storage.url, self.ctx.state.home / "storage",
                                                                 create=True)
        self.ctx.reporter.detail(f"runs are kept in {self.record.storage.url}")
        # A master lease an earlier cluster of this name left would fence this one's master (cluster/master_lease.py).
        storage = self.ctx.provider.open_storage(self.record.storage)
        storage.delete([LeaseBook(storage, cfg.name).key])

    def agent_access(self) -> None:
        provider = self.ctx.provider
        if isinstance(provider, AgentOnMaster):  # the step is planned only then
            created = provider.prepare_agent_access(self.ctx.config, self.network, self.image.key, self.record.storage)
            self.record.add_resources("role", created)

    def use_image(self) -> None:
        self.ctx.reporter.detail(self.image.describe())
        self._record_image(self.image.image)

    def launch_master(self) -> None:
        # A snapshot can't be restored onto a smaller disk: bake from a small one, grow it afterwards.
        root = bake_root_gib(self.ctx.provider) if self._grown_root() else None
        # One node only: node0 alone is the master (on AWS every node carries the cluster's instance profile).
        nodes = self.ctx.provider.launch(LaunchRequest(self.ctx.config, 1, self.image.image, Role.MASTER, 0,
                                                       self.network, root_gib=root))
        add_nodes(self.ctx, self.record, nodes, self.shell)

    def _grown_root(self) -> bool:
        small = bake_root_gib(self.ctx.provider)
        wanted = root_gib(self.ctx.provider, self.ctx.config)
        return self.image.action is ImageAction.BAKE and small is not None and wanted is not None and wanted > small

    def grow_master(self) -> None:
        master = self.record.node_list()[0]
        if isinstance(self.ctx.provider, SizesDisks) and self.ctx.provider.grow_root(self.ctx.config, master):
            run_on_master(self.ctx, master, self.shell, GROW_ROOT_FS, "growing the master's root filesystem")

    def configure(self) -> None:
        started = time.monotonic()
        runner = playbook_runner(self.ctx, self.shell)
        runner.run_all(load_playbooks(), self.record.node_list(), self.ctx.reporter.detail)
        self.configure_seconds = time.monotonic() - started

    def bake(self) -> None:
        master = self.record.node_list()[0]
        if self.ctx.provider.shares_host:
            baked = self.ctx.provider.bake(self.ctx.config, master, str(self.image.key))
        else:
            baked = self._bake_clean(master)
        self.image = ImagePlan(self.image.key, baked, ImageAction.BAKE, self.image.base_id)
        self._record_image(baked)
        self.record.add_resources("image", [baked.id])
        self.bake_lock.release()

    def bake_in_background(self) -> None:
        master = self.record.node_list()[0]
        image_id = self._with_identity_set_aside(master, lambda restore: start_bake(
            self.ctx.provider, self.ctx.config, master, str(self.image.key), on_snapshot=restore,
            configure_seconds=self.configure_seconds))
        self.image = replace(self.image, background=image_id)
        self.record.image = ImageRecord(key=self.image.key, action="bake", background=image_id,
                                        base=self.image.base_id)
        self.record.add_resources("image", [image_id])
        self.bake_lock.release()

    def _bake_clean(self, master: Node) -> Image:
        """Bake with the master's own identity left out of the image, and put back right after the snapshot."""
        return self._with_identity_set_aside(master, lambda restore: self.ctx.provider.bake(
            self.ctx.config, master, str(self.image.key), on_snapshot=restore))

    def _with_identity_set_aside(self, master: Node, snapshot: Callable[[Callable[[], None]], T]) -> T:
        restored: list[bool] = []

        def restore() -> None:
            if not restored:
                restored.append(True)
                run_on_master(self.ctx, master, self.shell, IMAGE_RESTORE, "restoring the master after the snapshot")

        run_on_master(self.ctx, master, self.shell, IMAGE_PREPARE, "preparing the master for its image")
        try:
            return snapshot(restore)
        finally:
            restore()

    def launch_workers(self) -> None:
        cfg = self.ctx.config
        master = self.record.node_list()[0]
        nodes = self.ctx.provider.launch(LaunchRequest(cfg, cfg.nodes - 1, self.image.image, Role.WORKER, 1,
                                                       self.network, near=master))
        add_nodes(self.ctx, self.record, nodes, self.shell)

    def launch_all(self) -> None:
        cfg, provider = self.ctx.config, self.ctx.provider
        # Ctrl-C reaches only this thread: the pool still finishes both launches, and the rollback
        # finds their nodes by the cluster's tag.
        with ThreadPoolExecutor(max_workers=2) as pool:
            master = pool.submit(provider.launch, LaunchRequest(cfg, 1, self.image.image, Role.MASTER, 0, self.network))
            workers = pool.submit(provider.launch,
                                  LaunchRequest(cfg, cfg.nodes - 1, self.image.image, Role.WORKER, 1, self.network))
            wait([master, workers])
        launched = [node for future in (master, workers) if future.exception() is None for node in future.result()]
        failed = [error for error in (master.exception(), workers.exception()) if error is not None]
        if failed:
            self.record.add_resources("nodes", [n.id for n in launched])
            raise failed[0]
        master_node, strays = launched[0], [n for n in launched[1:] if n.zone != launched[0].zone]
        if strays:
            # The two launches met different capacity: the workers follow the master's zone, as in `up`.
            launched = [n for n in launched if n not in strays]
            self.ctx.reporter.warn(f"{len(strays)} worker(s) landed in {strays[0].zone}, not in node0's zone "
                                   f"{master_node.zone}; launching them again there")
            for node in strays:
                remove_node(provider, cfg, node)
            launched += provider.launch(LaunchRequest(cfg, len(strays), self.image.image, Role.WORKER, 1, self.network,
                                        near=master_node))
        add_nodes(self.ctx, self.record, launched, self.shell)

    def write_files(self) -> None:
        write_cluster_files(self.ctx, self.record.node_list(), self.shell)

    def check_reach(self) -> None:
        check_mesh(self.ctx, self.record.node_list(), self.shell)

    def watch(self) -> None:
        self.autostop = keep_watch(self.ctx, self.shell, self.record).describe()
        self.ctx.reporter.detail(self.autostop)

    def _record_image(self, image: Image | None) -> None:
        self.record.image = ImageRecord(key=self.image.key, action=self.image.action.value, image=image,
                                        background=self.image.background, base=self.image.base_id)
