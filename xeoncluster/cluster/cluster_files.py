"""The ssh config, known_hosts and MPI hostfile, for the user's machine and for the master.

Every node's name, address and key is checked before it is written (untrusted.py): a value that
could add a line (a newline in an address) is refused, never escaped.
"""
from __future__ import annotations

from pathlib import Path

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.state import StateDir
from xeoncluster.providers.base import Node
from xeoncluster.wire.layout import KNOWN_HOSTS, MASTER_KEY, home_relative

SOURCE = "the cluster's node record"


def _checked(nodes: list[Node]) -> list[Node]:
    return [untrusted.node(node, SOURCE) for node in nodes]


def user_ssh_config(nodes: list[Node], user: str, key: Path, known_hosts: Path) -> str:
    """Used by `xeoncluster ssh` from the user's shell: every node by name, strictly pinned."""
    blocks = [
        f"Host {node.name}\n  HostName {node.ssh_host}\n" for node in _checked(nodes)
    ]
    common = (
        f"Host {' '.join(n.name for n in nodes)}\n"
        f"  User {user}\n"
        f"  IdentityFile {key}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known_hosts}\n"
        "  StrictHostKeyChecking yes\n"
        "  GlobalKnownHostsFile /dev/null\n"
        "  LogLevel ERROR\n"
    )
    return "".join(blocks) + common


def master_ssh_config(nodes: list[Node], user: str) -> str:
    """On the master, nodes are reached by name over their private addresses (MPI uses this)."""
    blocks = [f"Host {node.name}\n  HostName {_private(node)}\n" for node in _checked(nodes)]
    common = (
        f"Host {' '.join(n.name for n in nodes)}\n"
        f"  User {user}\n"
        f"  IdentityFile {home_relative(MASTER_KEY)}\n"
        "  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking yes\n"
        f"  UserKnownHostsFile {home_relative(KNOWN_HOSTS)}\n"
        "  LogLevel ERROR\n"
    )
    return "".join(blocks) + common


def _private(node: Node) -> str:
    return untrusted.address(node.private_ip, SOURCE, f"{node.name}'s private address")


def known_hosts(entries: list[tuple[Node, str]], address: str = "ssh_host") -> str:
    lines = []
    for node, key in entries:
        untrusted.node(node, SOURCE)
        untrusted.host_key(key, f"{node.name}'s host key record")
        hosts = [node.name, untrusted.address(getattr(node, address), SOURCE, f"{node.name}'s address")]
        if node.private_ip and node.private_ip not in hosts:
            hosts.append(node.private_ip)
        lines.append(f"{','.join(hosts)} {key}")
    return "\n".join(lines) + "\n"


def hostfile(nodes: list[Node]) -> str:
    """Intel MPI's -f file: the master first, so rank 0 lands on it."""
    ordered = sorted(_checked(nodes), key=lambda n: (not n.is_master, n.index))
    return "".join(f"{node.name}\n" for node in ordered)


def preferred_key(keys: list[str]) -> str:
    """ed25519 where the node offers it (what OpenSSH and paramiko negotiate first), else the first."""
    return next((k for k in keys if k.startswith("ssh-ed25519 ")), keys[0])


def read_known(state: StateDir) -> dict[str, str]:
    if not state.known_hosts.exists():
        return {}
    result = {}
    for line in state.known_hosts.read_text().splitlines():
        hosts, _, key = line.partition(" ")
        if key:
            result[hosts.split(",")[0]] = key
    return result
