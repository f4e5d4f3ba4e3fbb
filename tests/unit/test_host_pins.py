"""A node added under a name another machine had takes its own host key, never the old machine's pin."""
from __future__ import annotations

from pathlib import Path

from xeoncluster.cluster.cluster_files import read_known
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord, StateDir
from xeoncluster.core.progress import Reporter
from xeoncluster.operations.up_nodes import add_nodes
from xeoncluster.providers.base import Node
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.local.provider import LocalProvider

OLD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN5SOPyOLDOLDOLD"
NEW_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIT+11iNEWNEWNEW"
MASTER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMASTERMASTER"


class ScanningShell:
    """What add_nodes asks of a shell, with the new machine's key as ssh-keyscan would see it."""

    def wait_ready(self, nodes: list[Node], timeout: float) -> None: ...

    def wait_login(self, nodes: list[Node], timeout: float, detail: object) -> None: ...

    def scan_host_key(self, node: Node) -> str:
        return NEW_KEY


def node(index: int, role: str) -> Node:
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
    record.set_nodes([node(0, "master")])
    ctx = CommandContext(config, state, LocalProvider(tmp_path / "root"), Reporter())
    add_nodes(ctx, record, [node(1, "worker")], ScanningShell())  # type: ignore[arg-type]
    assert read_known(state) == {"node0": MASTER_KEY, "node1": NEW_KEY}
