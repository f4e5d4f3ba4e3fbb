"""Trust, third round: the master's successor in a handover (agent/handover.py) is pinned by the key the
provider shows out of band, never by what answers at its address: a console that shows none in time ends
the handover, with the successor removed and nothing of it pinned. A provider without an out-of-band
source scans, as before; a successor that fails to be readied is removed either way."""
from __future__ import annotations

from pathlib import Path

import pytest

from xeoncluster.agent.handover import Handover
from xeoncluster.cluster.cluster_files import read_known
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord, StateDir
from xeoncluster.core.progress import Reporter
from xeoncluster.providers.base import LaunchRequest, Removed
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.node_kinds import Node, Role
from xeoncluster.remote.shell import SshIdentity

MASTER = Node("node0", "i-0aaaaaaaaaaaaaaaa", "10.0.0.2", "10.0.0.2", Role.MASTER, "spot")
WORKER = Node("node1", "i-0bbbbbbbbbbbbbbbb", "10.0.0.3", "10.0.0.3", Role.WORKER, "spot")
SUCCESSOR = Node("node0", "i-0cccccccccccccccc", "10.0.0.9", "10.0.0.9", Role.MASTER, "spot")
MASTER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMASTERMASTER"
WORKER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIWORKERWORKER"
SCANNED_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAISCANNEDBYANYONE"


class Cloud:
    """A provider that launches the successor and removes nodes; `Console` adds its out-of-band keys."""

    name = "fake"

    def __init__(self, launches: Node = SUCCESSOR) -> None:
        self.running, self.launches = [MASTER, WORKER], launches
        self.removed: list[str] = []

    def nodes(self, cluster: ClusterConfig, priced: bool = True) -> list[Node]:
        return list(self.running)

    def launch(self, request: LaunchRequest) -> list[Node]:
        self.running.append(self.launches)
        return [self.launches]

    def remove_node(self, cluster: ClusterConfig, node: Node) -> Removed:
        self.removed.append(node.id)
        self.running = [n for n in self.running if n.id != node.id]
        return Removed({"instances": [node.id]})


class Console(Cloud):
    """Its console had not shown the successor's keys when the wait for them ran out."""

    def host_keys(self, node: Node) -> list[str]:
        return []


class Ended(Exception):
    """Where the test has seen what it came for: the handover goes no further."""


class Shell:
    def __init__(self) -> None:
        self.scanned: list[str] = []

    def wait_ready(self, nodes: list[Node], timeout: float) -> None: ...

    def scan_host_key(self, node: Node) -> str:
        self.scanned.append(node.name)
        return SCANNED_KEY

    def wait_login(self, nodes: list[Node], timeout: float, detail: object) -> None:
        raise Ended("logged in with the pinned key")

    def close(self) -> None: ...


def context(tmp_path: Path, provider: Cloud, shell: Shell) -> tuple[CommandContext, ClusterRecord]:
    """A cluster of two, its master and worker pinned, as its run agent on the master sees it."""
    state = StateDir("h1", tmp_path / "home")
    state.path.mkdir(parents=True)
    state.known_hosts.write_text(f"node0,10.0.0.2 {MASTER_KEY}\nnode1,10.0.0.3 {WORKER_KEY}\n")
    record = ClusterRecord(name="h1", provider="aws", config={"nodes": 2})
    record.set_nodes([MASTER, WORKER])
    record.add_resources("nodes", [MASTER.id, WORKER.id])
    state.save(record)

    def shells(_identity: SshIdentity) -> Shell:
        return shell

    config = ClusterConfig.model_validate({"name": "h1", "provider": "aws"})
    return CommandContext(config, state, provider, Reporter(fancy=False), shells), record  # type: ignore[arg-type]


def handover(tmp_path: Path, provider: Cloud, shell: Shell) -> tuple[Handover, StateDir]:
    ctx, record = context(tmp_path, provider, shell)
    return Handover(ctx, record, lambda _node: None, lambda _node: None), ctx.state


def test_a_successor_whose_console_shows_no_host_key_is_removed_and_never_scanned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    provider, shell = Console(), Shell()
    readying, state = handover(tmp_path, provider, shell)
    readying._run()  # the body of its thread
    assert shell.scanned == [] and not readying.ready
    assert provider.removed == [SUCCESSOR.id] and SUCCESSOR not in provider.running
    saved = state.load()
    assert saved is not None and SUCCESSOR.id not in saved.resources["nodes"]
    assert SCANNED_KEY not in state.known_hosts.read_text() and "10.0.0.9" not in state.known_hosts.read_text()
    assert read_known(state) == {"node0": MASTER_KEY, "node1": WORKER_KEY}
    assert "showed no host key for node0 (i-0cccccccccccccccc)" in capsys.readouterr().err


def test_a_provider_with_no_out_of_band_keys_still_scans_the_successor(tmp_path: Path) -> None:
    """...and a successor that fails later (here: its login) is unpinned and removed all the same."""
    provider, shell = Cloud(), Shell()
    readying, state = handover(tmp_path, provider, shell)
    readying._run()
    assert shell.scanned == ["node0"] and readying.key == SCANNED_KEY and not readying.ready
    assert provider.removed == [SUCCESSOR.id]
    assert read_known(state) == {"node0": MASTER_KEY, "node1": WORKER_KEY}
