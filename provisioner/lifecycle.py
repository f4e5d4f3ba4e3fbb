"""up / down (and images build) as ordered, named steps, and what to undo when a step fails.

The same code serves every provider; only the provider object differs. Each step records what it
created in state.json before the next step starts.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

from .errors import XeonClusterError
from .image import ImageChoice, choose_image, image_key
from .node_setup import add_nodes, check_mesh, playbook_runner, write_cluster_files
from .playbook import load_playbooks
from .providers.base import Image, Node, Removed
from .remote import NodeShell
from .session import Session
from .stacks import get_stack
from .state import ClusterRecord, StateDir

__all__ = ["build_image", "down", "resolve_image", "up"]


@dataclass
class UpResult:
    nodes: list[Node]
    image: ImageChoice | None
    already_up: bool = False
    seconds: float = 0.0


class StepFailed(XeonClusterError):
    pass


def up(session: Session, keep_on_failure: bool = False) -> UpResult:
    cfg, state = session.config, session.state
    with state.lock("up"):
        existing = state.load()
        if existing is not None and existing.status == "ready":
            return _already_up(session, existing)
        notes = session.provider.preflight(cfg)
        if existing is None:
            _refuse_orphans(session)
        choice = resolve_image(session)
        if existing is not None:
            _clean_leftovers(session)
        return _create(session, notes, choice, keep_on_failure)


def _refuse_orphans(session: Session) -> None:
    """Nodes of this name without local state (deleted folder, other machine): launching would clash."""
    orphans = session.provider.nodes(session.config)
    if orphans:
        raise XeonClusterError(
            f"cluster '{session.config.name}' already has {len(orphans)} node(s) "
            f"({', '.join(n.name for n in orphans)}) but no local state",
            hint=f"run `xeoncluster down --name {session.config.name}` (it finds them by name/tag), then up again")


def _already_up(session: Session, record: ClusterRecord) -> UpResult:
    live = session.provider.nodes(session.config)
    if len(live) != len(record.nodes):
        raise XeonClusterError(
            f"cluster '{record.name}' is recorded with {len(record.nodes)} nodes but {len(live)} exist",
            hint=f"run `xeoncluster down --name {record.name}` and `up` again")
    if len(live) != session.config.nodes:
        raise XeonClusterError(
            f"cluster '{record.name}' is already up with {len(live)} nodes (asked for {session.config.nodes})",
            hint="resizing is not supported: `down` first, or pick another --name")
    session.reporter.info(f"cluster '{record.name}' is already up; nothing to do")
    return UpResult(nodes=live, image=None, already_up=True)


def _clean_leftovers(session: Session) -> None:
    with session.reporter.step("removing leftovers of an earlier, unfinished up"):
        session.provider.terminate(session.config)


def resolve_image(session: Session) -> ImageChoice:
    """Read-only: which image the nodes start from. A bad image id fails here, before anything exists."""
    key = image_key(provider_base(session), get_stack(session.config.stack))
    return choose_image(session.config, session.provider, key)


def _create(session: Session, notes: list[str], choice: ImageChoice, keep_on_failure: bool) -> UpResult:
    cfg, state, reporter = session.config, session.state, session.reporter
    record = ClusterRecord(name=cfg.name, provider=cfg.provider, config=cfg.model_dump(mode="json"))
    state.save(record)
    reporter.attach_log(state.new_log("up"))
    for note in notes:
        reporter.warn(note) if note.lower().startswith("warning") else reporter.info(note)
    started = time.monotonic()
    current = "start"
    shell = session.shell()
    try:
        for current, action in _up_steps(session, record, choice, shell):
            with reporter.step(current):
                action()
            record.steps_done.append(current)
            state.save(record)
    except (Exception, KeyboardInterrupt) as exc:
        raise _rollback(session, current, exc, keep_on_failure) from exc
    finally:
        shell.close()
    record.status = "ready"
    state.save(record)
    return UpResult(nodes=record.node_list(), image=_image_choice(record), seconds=time.monotonic() - started)


def _image_choice(record: ClusterRecord) -> ImageChoice | None:
    if record.image is None:
        return None
    data = record.image.get("image")
    image = Image(**(data | {"snapshots": tuple(data.get("snapshots", ()))})) if data else None
    return ImageChoice(record.image["key"], image, record.image["action"])


def _up_steps(session: Session, record: ClusterRecord, initial: ImageChoice,
              shell: NodeShell) -> Iterator[tuple[str, Callable[[], None]]]:
    cfg, provider, state = session.config, session.provider, session.state
    choice = [initial]

    def prepare() -> None:
        state.ensure_key()
        created = provider.prepare(cfg, state.public_key())
        for kind, ids in created.items():
            record.add_resources(kind, ids)

    def image() -> None:
        session.reporter.detail(choice[0].describe())
        given = choice[0].image
        record.image = {"key": choice[0].key, "action": choice[0].action,
                        "image": _image_dict(given) if given else None}

    def master() -> None:
        count = cfg.nodes if choice[0].action == "none" else 1
        nodes = provider.launch(cfg, count, choice[0].image, "master", 0)
        add_nodes(session, record, nodes, shell)

    def configure() -> None:
        targets = record.node_list()
        runner = playbook_runner(session, shell)
        runner.run_all(load_playbooks(), targets, session.reporter.detail)

    def bake() -> None:
        baked = provider.bake(cfg, record.node_list()[0], choice[0].key)
        record.image = {"key": choice[0].key, "action": "bake", "image": _image_dict(baked)}
        record.add_resources("image", [baked.id])
        choice[0] = ImageChoice(choice[0].key, baked, "bake")

    def workers() -> None:
        nodes = provider.launch(cfg, cfg.nodes - 1, choice[0].image, "worker", 1)
        add_nodes(session, record, nodes, shell)

    def cluster_files_step() -> None:
        write_cluster_files(session, record.node_list(), shell)

    yield "prepare: key, network", prepare
    yield f"image: {initial.action}", image
    yield "launch master", master
    if choice[0].action in ("bake", "none"):
        yield "configure nodes (playbooks)", configure
    if choice[0].action == "bake":
        yield "bake image", bake
    if cfg.nodes > 1 and choice[0].action != "none":
        yield f"launch {cfg.nodes - 1} worker(s)", workers
    yield "write ssh config and hostfile on the master", cluster_files_step
    # Itself included: this proves the key, config and pinned keys written on the master work,
    # which matters even on one node (Hydra falls back to ssh when it can't tell a host is local).
    yield "check the master reaches every node by name", lambda: check_mesh(session, record.node_list(), shell)


def _image_dict(image: "Image") -> dict[str, object]:
    return asdict(image) | {"snapshots": list(image.snapshots)}


def provider_base(session: Session) -> str:
    base = getattr(session.provider, "base_image_id", None)
    return base(session.config) if callable(base) else f"{session.provider.name}-host"


def _rollback(session: Session, step: str, exc: BaseException, keep: bool) -> XeonClusterError:
    reporter, state, cfg = session.reporter, session.state, session.config
    interrupted = isinstance(exc, KeyboardInterrupt)
    reason = "interrupted (Ctrl-C)" if interrupted else (
        exc.message if isinstance(exc, XeonClusterError) else f"{type(exc).__name__}: {exc}")
    reporter.log(f"step '{step}' failed: {reason}")
    log = reporter.log_path
    if keep:
        record = state.load()
        if record is not None:
            record.status = "failed"
            state.save(record)
        return StepFailed(f"up failed at step '{step}': {reason}; resources were kept",
                          hint=f"inspect them, then run `xeoncluster down --name {cfg.name}`", log=log)
    reporter.info(f"up failed at '{step}'; removing what it created")
    try:
        removed = session.provider.terminate(cfg)
    except (Exception, KeyboardInterrupt) as cleanup:
        # State stays, so the cluster is still known; `down` finds the rest by tag either way.
        detail = cleanup.message if isinstance(cleanup, XeonClusterError) else f"{type(cleanup).__name__}: {cleanup}"
        reporter.log(f"rollback failed: {detail}")
        return StepFailed(f"up failed at step '{step}': {reason}; removing what it created also failed "
                          f"({detail}), so resources may remain",
                          hint=f"run `xeoncluster down --name {cfg.name}` to retry the cleanup", log=log)
    reporter.log(f"rolled back: {removed.items}")
    _discard_state(state)
    error = StepFailed(f"up failed at step '{step}': {reason}; everything it created was removed", log=log,
                       hint=getattr(exc, "hint", None))
    if interrupted:
        error.exit_code = 130
    return error


def _discard_state(state: StateDir) -> None:
    """Drop everything but the logs, so the failure can still be read."""
    for path in state.path.iterdir():
        if path.name in ("logs", "lock"):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def down(session: Session, purge_images: bool = False) -> Removed:
    with session.state.lock("down"):
        removed = session.provider.terminate(session.config)
        if purge_images:
            purge = getattr(session.provider, "purge_images", None)
            if callable(purge):
                removed = removed.merge(purge(session.config))
        session.state.remove()
        return removed


def build_image(session: Session) -> ImageChoice:
    """`images build`: bake without keeping a cluster (a one-node cluster that is removed again)."""
    choice = resolve_image(session)
    if choice.action != "bake":
        return choice
    builder = session.config.model_copy(update={"nodes": 1, "name": f"{session.config.name[:18]}-bake",
                                                "image": "auto"})
    build = Session(builder, StateDir(builder.name, session.state.path.parent.parent), session.provider,
                    session.reporter, session.shell_factory)
    try:
        result = up(build)
    finally:
        down(build)
    return result.image or choice
