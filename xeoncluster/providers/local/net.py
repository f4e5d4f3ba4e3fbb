"""Namespaces, veths and the bridge that make up a local cluster's network.

Every name is derived from the cluster and node names, so `down` can find leftovers without
any state file.
"""
from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers.local.spec import NETNS_PREFIX

MAX_NODES = 256


def sh(argv: list[str], check: bool = True, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, input=input_text)
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ProviderError(f"`{' '.join(argv)}` failed: {detail[-1] if detail else f'exit {result.returncode}'}")
    return result


def netns_name(cluster: str, node: str) -> str:
    return f"{NETNS_PREFIX}{cluster}-{node}"


def veth_name(cluster: str, node: str) -> str:
    # Interface names are capped at 15 bytes, so the host side carries a digest, not the names.
    return "xv" + hashlib.sha1(f"{cluster}/{node}".encode()).hexdigest()[:10]


def bridge_name(subnet: str) -> str:
    return "xcbr" + hashlib.sha1(subnet.encode()).hexdigest()[:8]


def gateway(subnet: str) -> str:
    return str(next(ipaddress.IPv4Network(subnet).hosts()))


@dataclass(frozen=True)
class NamespaceInfo:
    name: str
    cluster: str
    node: str
    ip: str | None


def list_namespaces() -> list[str]:
    out = sh(["ip", "-j", "netns", "list"], check=False).stdout.strip()
    if not out:
        return []
    return [entry["name"] for entry in json.loads(out) if entry["name"].startswith(NETNS_PREFIX)]


def cluster_namespaces(cluster: str) -> list[NamespaceInfo]:
    prefix = f"{NETNS_PREFIX}{cluster}-"
    found = []
    for name in list_namespaces():
        node = name[len(prefix):]
        if name.startswith(prefix) and node.startswith("node") and node[4:].isdigit():
            found.append(NamespaceInfo(name, cluster, node, namespace_ip(name)))
    return sorted(found, key=lambda info: int(info.node[4:]))


def namespace_ip(ns: str) -> str | None:
    out = sh(["ip", "-n", ns, "-j", "-4", "addr", "show", "dev", "eth0"], check=False).stdout.strip()
    if not out:
        return None
    for link in json.loads(out):
        for addr in link.get("addr_info", []):
            return str(addr["local"])
    return None


def used_ips() -> set[str]:
    return {ip for ns in list_namespaces() if (ip := namespace_ip(ns))}


def allocate_ips(subnet: str, count: int) -> list[str]:
    taken = used_ips() | {gateway(subnet)}
    free = [str(h) for h in ipaddress.IPv4Network(subnet).hosts() if str(h) not in taken]
    if len(free) < count:
        raise ProviderError(f"local.subnet {subnet} has only {len(free)} free addresses for {count} nodes",
                            hint="choose a larger local.subnet or remove other local clusters")
    return free[:count]


def check_free_addresses(subnet: str, count: int) -> None:
    """Preflight: before anything exists, not after the master is up."""
    taken = used_ips() | {gateway(subnet)}
    free = sum(1 for host in ipaddress.IPv4Network(subnet).hosts() if str(host) not in taken)
    if free < count:
        raise ConfigError(f"local.subnet {subnet} has {free} free address(es) for {count} node(s)",
                          hint="choose a larger local.subnet (e.g. a /16) or fewer --nodes")


def ensure_bridge(subnet: str) -> bool:
    """Create the bridge for this subnet (and its firewall) if missing. Returns True if it was created here."""
    bridge = bridge_name(subnet)
    if sh(["ip", "link", "show", bridge], check=False).returncode == 0:
        ensure_firewall(subnet)
        return False
    prefix = ipaddress.IPv4Network(subnet).prefixlen
    ensure_firewall(subnet)
    sh(["ip", "link", "add", bridge, "type", "bridge"])
    sh(["ip", "addr", "add", f"{gateway(subnet)}/{prefix}", "dev", bridge])
    sh(["ip", "link", "set", bridge, "up"])
    return True


def firewall_table(subnet: str) -> str:
    return f"xeoncluster_{bridge_name(subnet)}"


def ensure_firewall(subnet: str) -> None:
    """Nodes reach their peers over the bridge, but no service of this host: whatever arrives from the
    bridge for the host itself (its bridge address or any other) is dropped, except replies to
    connections the host opened (SSH to the nodes)."""
    table = firewall_table(subnet)
    if sh(["nft", "list", "table", "inet", table], check=False).returncode == 0:
        return
    bridge = bridge_name(subnet)
    sh(["nft", "-f", "-"], input_text=(
        f"table inet {table} {{\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy accept;\n"
        f'    iifname "{bridge}" ct state established,related accept\n'
        f'    iifname "{bridge}" counter drop\n'
        "  }\n"
        "}\n"))


def remove_firewall(subnet: str) -> None:
    sh(["nft", "delete", "table", "inet", firewall_table(subnet)], check=False)


def bridge_members(bridge: str) -> set[str]:
    out = sh(["ip", "-j", "link", "show", "master", bridge], check=False).stdout.strip()
    return {link["ifname"] for link in json.loads(out)} if out else set()


def bridge_in_use(bridge: str) -> bool:
    return bool(bridge_members(bridge))


def delete_cluster_veths(cluster: str, subnet: str, wait: float = 3.0) -> None:
    """Delete the host side of the cluster's veths now. Deleting a namespace destroys its veth only
    when the kernel gets round to the namespace's cleanup, and a bridge that still shows one of
    them as a member would be kept. This also catches the veth of a node whose namespace is gone."""
    bridge = bridge_name(subnet)
    ours = {veth_name(cluster, f"node{index}") for index in range(MAX_NODES)}
    for veth in sorted(bridge_members(bridge) & ours):
        sh(["ip", "link", "del", veth], check=False)
    deadline = time.monotonic() + wait
    while bridge_members(bridge) & ours and time.monotonic() < deadline:
        time.sleep(0.05)


def remove_bridge_if_unused(subnet: str) -> list[str]:
    bridge = bridge_name(subnet)
    if sh(["ip", "link", "show", bridge], check=False).returncode != 0:
        remove_firewall(subnet)
        return []
    if bridge_in_use(bridge):
        return []
    sh(["ip", "link", "del", bridge], check=False)
    remove_firewall(subnet)
    return [bridge]


def create_namespace(ns: str, veth: str, ip: str, subnet: str) -> None:
    prefix = ipaddress.IPv4Network(subnet).prefixlen
    sh(["ip", "netns", "add", ns])
    sh(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
    sh(["ip", "link", "set", veth, "master", bridge_name(subnet)])
    sh(["ip", "link", "set", veth, "up"])
    sh(["ip", "-n", ns, "addr", "add", f"{ip}/{prefix}", "dev", "eth0"])
    sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
    sh(["ip", "-n", ns, "link", "set", "lo", "up"])


def namespace_pids(ns: str) -> list[int]:
    out = sh(["ip", "netns", "pids", ns], check=False).stdout.split()
    return [int(pid) for pid in out if pid.isdigit()]


def kill_pids(pids: list[int], grace: float = 2.0) -> None:
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            _signal(pid, signal.SIGKILL)


def delete_namespace(ns: str) -> None:
    kill_pids(namespace_pids(ns))
    sh(["ip", "netns", "del", ns], check=False)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False


def forget_address(ip: str, namespaces: list[str]) -> None:
    """Drop `ip` from the host's and the nodes' ARP caches: a replacement node may get the address of
    the node it replaces, and a cached entry for the old MAC would keep peers from reaching it for
    tens of seconds."""
    if not ip:
        return
    sh(["ip", "neigh", "flush", "to", ip], check=False)
    for ns in namespaces:
        sh(["ip", "-n", ns, "neigh", "flush", "to", ip], check=False)
