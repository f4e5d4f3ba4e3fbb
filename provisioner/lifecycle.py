"""up / down as ordered, named steps, and what to undo when a step fails.

The same code serves every provider; only the provider object differs. Each step records what it
created in state.json before the next step starts.
"""
from __future__ import annotations

import shlex
import shutil
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

from . import cluster_files
from .config import ClusterConfig
from .errors import XeonClusterError
from .image import ImageChoice, choose_image, image_key, stack_digest
from .playbook import PlaybookRunner, load_playbooks
from .progress import Reporter
from .providers.base import Image, Node, Provider, Removed
from .remote import FabricShell, NodeShell, RemoteFile, SshIdentity
from .stacks import get_stack
from .state import ClusterRecord, StateDir, atomic_write

VENV = "~/venv"


@dataclass
class Session:
    """Everything a command needs: the resolved config, its state folder, provider and output."""

    config: ClusterConfig
    state: StateDir
    provider: Provider
    reporter: Reporter
    shell_factory: Callable[[SshIdentity], NodeShell] = FabricShell

    def identity(self) -> SshIdentity:
        return SshIdentity(user=self.config.ssh.user or "root", key=self.state.key,
                           known_hosts=self.state.known_hosts, timeout=self.config.ssh.timeout)

    def shell(self) -> NodeShell:
        return self.shell_factory(self.identity())


@dataclass
class UpResult:
    nodes: list[Node]
    image: ImageChoice | None
    already_up: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


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
        shell.close()
        raise _rollback(session, current, exc, keep_on_failure) from exc
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
        _add_nodes(session, record, nodes, shell)

    def configure() -> None:
        targets = record.node_list()
        runner = _playbook_runner(session, shell)
        runner.run_all(load_playbooks(), targets, session.reporter.detail)

    def bake() -> None:
        baked = provider.bake(cfg, record.node_list()[0], choice[0].key)
        record.image = {"key": choice[0].key, "action": "bake", "image": _image_dict(baked)}
        record.add_resources("image", [baked.id])
        choice[0] = ImageChoice(choice[0].key, baked, "bake")

    def workers() -> None:
        nodes = provider.launch(cfg, cfg.nodes - 1, choice[0].image, "worker", 1)
        _add_nodes(session, record, nodes, shell)

    def cluster_files_step() -> None:
        _write_cluster_files(session, record.node_list(), shell)

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
    yield "check the master reaches every node by name", lambda: _check_mesh(session, record.node_list(), shell)


def _image_dict(image: "Image") -> dict[str, object]:
    return asdict(image) | {"snapshots": list(image.snapshots)}


def provider_base(session: Session) -> str:
    base = getattr(session.provider, "base_image_id", None)
    return base(session.config) if callable(base) else f"{session.provider.name}-host"


def _add_nodes(session: Session, record: ClusterRecord, nodes: list[Node], shell: NodeShell) -> None:
    record.set_nodes(record.node_list() + nodes)
    record.add_resources("nodes", [n.id for n in nodes])
    session.state.save(record)
    shell.wait_ready(nodes, session.config.ssh.timeout)
    pin_host_keys(session, record.node_list(), shell)


def pin_host_keys(session: Session, nodes: list[Node], shell: NodeShell) -> None:
    """Pin each node's host key: out of band where the provider knows it, else trust on first use."""
    known = _read_known(session.state)
    entries = []
    for node in nodes:
        key = known.get(node.name)
        if key is None:
            offered = session.provider.host_keys(node)
            key = offered[0] if offered else shell.scan_host_key(node)
        entries.append((node, key))
    atomic_write(session.state.known_hosts, cluster_files.known_hosts(entries))
    atomic_write(session.state.ssh_config, cluster_files.user_ssh_config(
        nodes, session.identity().user, session.state.key, session.state.known_hosts))


def _read_known(state: StateDir) -> dict[str, str]:
    if not state.known_hosts.exists():
        return {}
    result = {}
    for line in state.known_hosts.read_text().splitlines():
        hosts, _, key = line.partition(" ")
        if key:
            result[hosts.split(",")[0]] = key
    return result


def _playbook_runner(session: Session, shell: NodeShell) -> PlaybookRunner:
    stack = get_stack(session.config.stack)
    source = session.provider.package_source(session.config, list(stack.packages), list(stack.index_urls))
    variables = {
        "venv": VENV,
        "stack": stack.name,
        "stack_digest": stack_digest(stack),
        "packages": " ".join(shlex.quote(p) for p in stack.packages),
        "pip_args": " ".join(shlex.quote(a) for a in source.pip_args),
    }
    return PlaybookRunner(shell, variables, apply_os_steps=getattr(session.provider, "applies_os_steps", True),
                          log=session.reporter.log, log_path=session.reporter.log_path)


def _write_cluster_files(session: Session, nodes: list[Node], shell: NodeShell) -> None:
    master = nodes[0]
    user = session.identity().user
    known = _read_known(session.state)
    shell.put_files(master, [
        RemoteFile(".ssh/id_ed25519", session.state.key.read_text(), 0o600),
        RemoteFile(".ssh/config", cluster_files.master_ssh_config(nodes, user), 0o600),
        RemoteFile(".ssh/known_hosts", cluster_files.known_hosts([(n, known[n.name]) for n in nodes],
                                                                  address="private_ip")),
        RemoteFile("hosts", cluster_files.hostfile(nodes)),
    ])
    atomic_write(session.state.hostfile, cluster_files.hostfile(nodes), 0o644)


def mesh_command(nodes: list[Node]) -> str:
    """One parallel ssh per node; each failure prints its node (a bare `wait` would hide them)."""
    names = " ".join(shlex.quote(n.name) for n in nodes)
    return (f"for h in {names}; do (ssh -o BatchMode=yes -o ConnectTimeout=10 \"$h\" true >/dev/null 2>&1 "
            f"|| echo \"{UNREACHABLE} $h\") & done; wait")


UNREACHABLE = "xeoncluster-unreachable"


def _check_mesh(session: Session, nodes: list[Node], shell: NodeShell) -> None:
    result = shell.run([nodes[0]], mesh_command(nodes))[nodes[0].name]
    failed = sorted(line.split()[1] for line in result.stdout.splitlines() if line.startswith(UNREACHABLE))
    if failed or not result.ok:
        detail = ", ".join(failed) if failed else result.last_line()
        raise XeonClusterError(f"the master cannot reach {detail} by name over SSH",
                               hint="check the nodes' security group / network", log=session.reporter.log_path)


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
    removed = session.provider.terminate(cfg)
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


@dataclass(frozen=True)
class NodeStatus:
    node: Node
    answers: bool
    detail: str = ""


def status(session: Session) -> list[NodeStatus]:
    nodes = session.provider.nodes(session.config)
    running = [n for n in nodes if n.state == "running"]
    reach = _reachability(session, running) if running and session.state.known_hosts.exists() else {}
    return [NodeStatus(n, reach.get(n.name, (False, n.state))[0], reach.get(n.name, (False, n.state))[1])
            for n in nodes]


def _reachability(session: Session, nodes: list[Node]) -> dict[str, tuple[bool, str]]:
    from concurrent.futures import ThreadPoolExecutor

    shell = session.shell()

    def probe(node: Node) -> tuple[bool, str]:
        try:
            out = shell.run([node], "true")[node.name]
            return out.ok, "ssh ok" if out.ok else out.last_line()
        except XeonClusterError as exc:
            return False, exc.message.split(": ", 1)[-1]

    try:
        with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
            return dict(zip((n.name for n in nodes), pool.map(probe, nodes)))
    finally:
        shell.close()


@dataclass(frozen=True)
class LocalPlan:
    """What `up` would create on a provider without a pricing/plan API of its own."""

    cluster: str
    provider: str
    nodes: int
    image: ImageChoice
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "provider": self.provider, "nodes": self.nodes,
                "image": {"key": self.image.key, "action": self.image.action,
                          "id": self.image.image.id if self.image.image else None},
                "usd_per_hour": 0.0, "notes": list(self.notes)}


def plan(session: Session) -> object:
    """A dry run: the request `up` would make, as a value. Read-only calls only."""
    provider_plan = getattr(session.provider, "plan", None)
    if callable(provider_plan):
        # The provider runs the preflight itself: a plan still shows what it can when the base
        # image is unknown (e.g. AWS's Ubuntu SSM parameter is missing), where `up` would stop.
        stack = get_stack(session.config.stack)
        return provider_plan(session.config, lambda base: image_key(base, stack))
    notes = session.provider.preflight(session.config)
    choice = resolve_image(session)
    return LocalPlan(session.config.name, session.provider.name, session.config.nodes, choice,
                     tuple(notes) + (choice.describe(),))


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
