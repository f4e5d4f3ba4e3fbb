"""`xeoncluster up`: ordered, named steps; each records what it created in state.json before the next.

Steps: prepare (key, network), image (the ImagePlan that `plan` shows), launch master, configure
(playbooks), bake, launch workers, write the master's ssh config and hostfile, check the master
reaches every node. A failure or Ctrl-C rolls back what this run created (up_rollback.py).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

from ..bake_lock import BakeLock
from ..context import CommandContext
from ..errors import XeonClusterError
from ..image import ImageAction, ImagePlan, decide_image
from ..playbook import load_playbooks
from ..providers.base import Image, Network, Node
from ..remote import NodeShell
from ..stacks import get_stack
from ..state import ClusterRecord
from .up_nodes import add_nodes, check_mesh, playbook_runner, write_cluster_files
from .up_rollback import rollback

Step = tuple[str, Callable[[], None]]


@dataclass
class UpResult:
    cluster: str
    nodes: list[Node]
    image: ImagePlan | None
    already_up: bool = False
    seconds: float = 0.0


def run(ctx: CommandContext, keep_on_failure: bool = False) -> UpResult:
    with ctx.state.lock("up"):
        existing = ctx.state.load()
        if existing is not None and existing.status == "ready":
            return _already_up(ctx, existing)
        notes = ctx.provider.preflight(ctx.config)
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
    again = decide_image(ctx.config, ctx.provider, get_stack(ctx.config.stack))
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


def _already_up(ctx: CommandContext, record: ClusterRecord) -> UpResult:
    live = {node.name: node for node in ctx.provider.nodes(ctx.config)}
    missing = [node.name for node in record.node_list() if node.name not in live]
    down = [f"{node.name} ({node.state})" for node in live.values() if node.state != "running"]
    if missing or down:
        what = ", ".join([f"{name} (gone)" for name in missing] + down)
        raise XeonClusterError(
            f"cluster '{record.name}' is up, but not all its nodes are: {what}",
            hint=f"replacing a node is not supported yet: run `xeoncluster down --name {record.name}`, then `up` again")
    if len(live) != ctx.config.nodes:
        raise XeonClusterError(
            f"cluster '{record.name}' is already up with {len(live)} nodes (asked for {ctx.config.nodes})",
            hint="resizing is not supported: `down` first, or pick another --name")
    ctx.reporter.info(f"cluster '{record.name}' is already up; nothing to do")
    return UpResult(record.name, list(live.values()), None, already_up=True)


def _clean_leftovers(ctx: CommandContext) -> None:
    with ctx.reporter.step("removing leftovers of an earlier, unfinished up"):
        ctx.provider.terminate(ctx.config)


def _create(ctx: CommandContext, notes: list[str], image: ImagePlan, keep_on_failure: bool,
            bake_lock: BakeLock) -> UpResult:
    cfg, state, reporter = ctx.config, ctx.state, ctx.reporter
    record = ClusterRecord(name=cfg.name, provider=cfg.provider, config=cfg.model_dump(mode="json"))
    state.save(record)
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
    record.status = "ready"
    state.save(record)
    return UpResult(cfg.name, record.node_list(), steps.image, seconds=time.monotonic() - started)


class UpSteps:
    """The steps of one `up`, sharing what earlier steps produced (the network, the image)."""

    def __init__(self, ctx: CommandContext, record: ClusterRecord, image: ImagePlan, shell: NodeShell,
                 bake_lock: BakeLock) -> None:
        self.ctx, self.record, self.image, self.shell = ctx, record, image, shell
        self.bake_lock = bake_lock
        self.network: Network | None = None

    def sequence(self) -> list[Step]:
        nodes = self.ctx.config.nodes
        steps: list[Step] = [("prepare: key, network", self.prepare), (f"image: {self.image.action.value}", self.use_image),
                             ("launch master", self.launch_master)]
        if self.image.runs_playbooks:
            steps.append(("configure nodes (playbooks)", self.configure))
        if self.image.action is ImageAction.BAKE:
            steps.append(("bake image", self.bake))
        if nodes > 1 and self.image.action is not ImageAction.NONE:
            steps.append((f"launch {nodes - 1} worker(s)", self.launch_workers))
        steps.append(("write ssh config and hostfile on the master", self.write_files))
        # Itself included: this proves the key, config and pinned keys written on the master work,
        # which matters even on one node (Hydra falls back to ssh when it can't tell a host is local).
        steps.append(("check the master reaches every node by name", self.check_reach))
        return steps

    def prepare(self) -> None:
        self.ctx.state.ensure_key()
        prepared = self.ctx.provider.prepare(self.ctx.config, self.ctx.state.public_key())
        for kind, ids in prepared.created.items():
            self.record.add_resources(kind, ids)
        self.network = prepared.network

    def use_image(self) -> None:
        self.ctx.reporter.detail(self.image.describe())
        self._record_image(self.image.image)

    def launch_master(self) -> None:
        count = self.ctx.config.nodes if self.image.action is ImageAction.NONE else 1
        nodes = self.ctx.provider.launch(self.ctx.config, count, self.image.image, "master", 0, self.network)
        add_nodes(self.ctx, self.record, nodes, self.shell)

    def configure(self) -> None:
        runner = playbook_runner(self.ctx, self.shell)
        runner.run_all(load_playbooks(), self.record.node_list(), self.ctx.reporter.detail)

    def bake(self) -> None:
        baked = self.ctx.provider.bake(self.ctx.config, self.record.node_list()[0], str(self.image.key))
        self.image = ImagePlan(self.image.key, baked, ImageAction.BAKE, self.image.base_id)
        self._record_image(baked)
        self.record.add_resources("image", [baked.id])
        self.bake_lock.release()

    def launch_workers(self) -> None:
        cfg = self.ctx.config
        nodes = self.ctx.provider.launch(cfg, cfg.nodes - 1, self.image.image, "worker", 1, self.network)
        add_nodes(self.ctx, self.record, nodes, self.shell)

    def write_files(self) -> None:
        write_cluster_files(self.ctx, self.record.node_list(), self.shell)

    def check_reach(self) -> None:
        check_mesh(self.ctx, self.record.node_list(), self.shell)

    def _record_image(self, image: Image | None) -> None:
        data = asdict(image) | {"snapshots": list(image.snapshots)} if image else None
        self.record.image = {"key": self.image.key, "action": self.image.action.value, "image": data}
