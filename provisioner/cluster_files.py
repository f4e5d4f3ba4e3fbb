"""The ssh config, known_hosts and MPI hostfile, for the user's machine and for the master."""
from __future__ import annotations

from pathlib import Path

from .providers.base import Node
from .remote_layout import KNOWN_HOSTS, MASTER_KEY, home_relative


def user_ssh_config(nodes: list[Node], user: str, key: Path, known_hosts: Path) -> str:
    """Used by `xeoncluster ssh` from the user's shell: every node by name, strictly pinned."""
    blocks = [
        f"Host {node.name}\n  HostName {node.ssh_host}\n" for node in nodes
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
    blocks = [f"Host {node.name}\n  HostName {node.private_ip}\n" for node in nodes]
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


def known_hosts(entries: list[tuple[Node, str]], address: str = "ssh_host") -> str:
    lines = []
    for node, key in entries:
        hosts = [node.name, getattr(node, address)]
        if node.private_ip and node.private_ip not in hosts:
            hosts.append(node.private_ip)
        lines.append(f"{','.join(hosts)} {key}")
    return "\n".join(lines) + "\n"


def hostfile(nodes: list[Node]) -> str:
    """Intel MPI's -f file: the master first, so rank 0 lands on it."""
    ordered = sorted(nodes, key=lambda n: (n.role != "master", int(n.name[4:]) if n.name[4:].isdigit() else 0))
    return "".join(f"{node.name}\n" for node in ordered)
