"""Configuring nodes over SSH: pin host keys, run playbooks, write the master's files, check reach."""
from __future__ import annotations

import shlex

from . import cluster_files
from .errors import XeonClusterError
from .image import stack_digest
from .playbook import PlaybookRunner
from .providers.base import Node
from .remote import NodeShell, RemoteFile
from .session import VENV, Session
from .stacks import get_stack
from .state import ClusterRecord, StateDir, atomic_write


def add_nodes(session: Session, record: ClusterRecord, nodes: list[Node], shell: NodeShell) -> None:
    record.set_nodes(record.node_list() + nodes)
    record.add_resources("nodes", [n.id for n in nodes])
    session.state.save(record)
    shell.wait_ready(nodes, session.config.ssh.timeout)
    pin_host_keys(session, record.node_list(), shell)


def pin_host_keys(session: Session, nodes: list[Node], shell: NodeShell) -> None:
    """Pin each node's host key: out of band where the provider knows it, else trust on first use."""
    known = read_known(session.state)
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


def read_known(state: StateDir) -> dict[str, str]:
    if not state.known_hosts.exists():
        return {}
    result = {}
    for line in state.known_hosts.read_text().splitlines():
        hosts, _, key = line.partition(" ")
        if key:
            result[hosts.split(",")[0]] = key
    return result


def playbook_runner(session: Session, shell: NodeShell) -> PlaybookRunner:
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


def write_cluster_files(session: Session, nodes: list[Node], shell: NodeShell) -> None:
    master = nodes[0]
    user = session.identity().user
    known = read_known(session.state)
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


def check_mesh(session: Session, nodes: list[Node], shell: NodeShell) -> None:
    result = shell.run([nodes[0]], mesh_command(nodes))[nodes[0].name]
    failed = sorted(line.split()[1] for line in result.stdout.splitlines() if line.startswith(UNREACHABLE))
    if failed or not result.ok:
        detail = ", ".join(failed) if failed else result.last_line()
        raise XeonClusterError(f"the master cannot reach {detail} by name over SSH",
                               hint="check the nodes' security group / network", log=session.reporter.log_path)
