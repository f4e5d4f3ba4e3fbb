"""Read-only questions about a cluster: which nodes answer, and what `up` would do."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .errors import XeonClusterError
from .image import ImageChoice, image_key
from .lifecycle import resolve_image
from .providers.base import Node
from .session import Session
from .stacks import get_stack


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
