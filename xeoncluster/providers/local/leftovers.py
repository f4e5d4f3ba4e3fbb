"""Find what a local cluster left on this machine when its state folder is gone or unreadable.

No credentials and no config are needed: the namespaces are named after the cluster, each
namespace's eth0 address names the subnet (and so the bridge), and each node's sshd was started
with `-f ROOT/clusters/NAME/nodeK/sshd_config`, which names the local.root.
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.local import net
from xeoncluster.providers.local.node import sshd_processes
from xeoncluster.providers.local.spec import LocalSettings


@dataclass(frozen=True)
class LocalLeftovers:
    namespaces: tuple[str, ...]
    root: Path | None    # None: no sshd names it; the caller falls back to the configured local.root
    subnet: str | None   # None: no namespace has an address left

    @property
    def found(self) -> bool:
        return bool(self.namespaces) or self.root is not None


def find_local_leftovers(cluster: str, configured_root: Path) -> LocalLeftovers:
    namespaces = tuple(info.name for info in net.cluster_namespaces(cluster))
    subnet = next((found for ns in namespaces if (found := namespace_subnet(ns))), None)
    roots = sshd_roots(cluster)
    root = roots[0] if roots else None
    if root is None and (configured_root / "clusters" / cluster).is_dir():
        root = configured_root
    return LocalLeftovers(namespaces, root, subnet)


def namespace_subnet(ns: str) -> str | None:
    out = net.sh(["ip", "-n", ns, "-j", "-4", "addr", "show", "dev", "eth0"], check=False).stdout.strip()
    for link in json.loads(out) if out else []:
        for addr in link.get("addr_info", []):
            return str(ipaddress.IPv4Network(f"{addr['local']}/{addr['prefixlen']}", strict=False))
    return None


def sshd_roots(cluster: str) -> list[Path]:
    """local.root of every sshd still serving a node of `cluster`, in or out of its namespace."""
    pattern = re.compile(rf"(?:^|\s)-f\s+(/\S*)/clusters/{re.escape(cluster)}/node\d+/sshd_config(?:\s|$)")
    roots: list[Path] = []
    for _, cmdline in sshd_processes():
        match = pattern.search(cmdline)
        if match and Path(match.group(1)) not in roots:
            roots.append(Path(match.group(1)))
    return roots


def locate(config: ClusterConfig) -> dict[str, Any] | None:
    leftovers = find_local_leftovers(config.name, config.section(LocalSettings).root)
    if not leftovers.found:
        return None
    return {"provider": "local", "local.root": leftovers.root or config.section(LocalSettings).root,
            "local.subnet": leftovers.subnet or config.section(LocalSettings).subnet}
