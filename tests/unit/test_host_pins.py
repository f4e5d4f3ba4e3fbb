"""A node added under a name another machine had takes its own host key, never the old machine's pin; and the
run agent pins a node it adds only by the key its provider shows out of band."""
from __future__ import annotations

from pathlib import Path

from tests.unit.test_handover import MASTER_KEY as PINNED_MASTER_KEY
from tests.unit.test_handover import WORKER, WORKER_KEY, Console, Shell, context
from xeoncluster.agent.proactive import Replacement
from xeoncluster.cluster.cluster_files import read_known
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord, ImageRecord, StateDir
from xeoncluster.core.progress import Reporter
from xeoncluster.operations.up_nodes import add_nodes
from xeoncluster.providers.base import Image, Node
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.local.provider import LocalProvider
from xeoncluster.providers.node_kinds import Role

OLD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN5SOPyOLDOLDOLD"
NEW_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIT+11iNEWNEWNEW"
MASTER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMASTERMASTER"


class ScanningShell:
    """What add_nodes asks of a shell, with the new machine's key as ssh-keyscan would see it."""

    def wait_ready(self, nodes: list[Node], timeout: float) -> None: ...

    def wait_login(self, nodes: list[Node], timeout: float, detail: object) -> None: ...

    def scan_host_key(self, node: Node) -> str:
        return NEW_KEY


def node(index: int, role: Role) -> Node:
    return Node(f"node{index}", f"i-{index}", f"10.0.0.{index + 2}", f"10.0.0.{index + 2}", role, "local")


def test_a_new_node_under_a_lost_node_s_name_is_pinned_afresh(tmp_path: Path) -> None:
    """CI: a noticed node1 was swapped for node2, node2 was lost, and `up` added a new node1 at node1's old
    address. Its login failed: the old node1's pin was still there, and was taken for the new machine's."""
    config = ClusterConfig.model_validate({"name": "pins", "provider": "local"})
    state = StateDir("pins", tmp_path / "home")
    state.path.mkdir(parents=True)
    state.known_hosts.write_text(f"node0,10.0.0.2 {MASTER_KEY}\nnode1,10.0.0.3 {OLD_KEY}\n")
    state.key.write_text("")
    record = ClusterRecord(name="pins", provider="local")
    record.set_nodes([node(0, Role.MASTER)])
    ctx = CommandContext(config, state, LocalProvider(tmp_path / "root"), Reporter())
    add_nodes(ctx, record, [node(1, Role.WORKER)], ScanningShell())  # type: ignore[arg-type]
    assert read_known(state) == {"node0": MASTER_KEY, "node1": NEW_KEY}


def test_the_run_agent_trusts_no_replacement_s_key_on_first_use(tmp_path: Path) -> None:
    """Trust, third round: a worker the agent on the master launches to replace a noticed one, whose key the
    provider's console did not show in time, is removed again, not scanned: what ssh-keyscan sees at its
    address would reach every node's known_hosts."""
    new = Node("node2", "i-0dddddddddddddddd", "10.0.0.4", "10.0.0.4", Role.WORKER, "spot")
    provider, shell = Console(launches=new), Shell()
    ctx, record = context(tmp_path, provider, shell)
    record.image = ImageRecord(key="k", action="use", image=Image("ami-0123", "k", "xc-k"))
    failed: list[str] = []
    Replacement(ctx, record, WORKER, lambda _n: None, lambda _n: None, failed.append)._run()  # its thread's body
    assert shell.scanned == [] and provider.removed == [new.id]
    assert failed and "showed no host key for node2 (i-0dddddddddddddddd)" in failed[0]
    saved = ctx.state.load()
    assert saved is not None and saved.node("node2") is None and record.node("node2") is None
    assert read_known(ctx.state) == {"node0": PINNED_MASTER_KEY, "node1": WORKER_KEY}
