"""The local provider: each node is a network namespace on this machine with its own sshd.

A node gets its own hostname (UTS namespace), its own /etc/hosts and a private home (mount
namespace, an overlay whose lower layer is the image), so a file never copied to a node is really
missing there. Images are folders holding a baked home.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers.abilities import PlansResources, ReadsHostKeys, RemovesNodes
from xeoncluster.providers.base import Image, LaunchRequest, Node, PlannedResource, Prepared, Provider, Removed
from xeoncluster.providers.local import net
from xeoncluster.providers.local.node import (
    SSHD,
    NodePaths,
    cpu_list,
    node_boot_script,
    remove_tree,
    sshd_config,
    sshd_pid,
    stray_sshd_pids,
    wait_for_port,
)
from xeoncluster.providers.local.spec import LOCAL, LocalSettings
from xeoncluster.providers.node_kinds import NodeState, Role

if TYPE_CHECKING:
    from xeoncluster.providers.config import ClusterConfig

REQUIRED_TOOLS = ("ip", "unshare", "nsenter", "ssh-keygen", "tar", "nft")


# This machine's stand-in for a cloud with no spot capacity left: while the cluster's folder holds this
# file, launches fail as an empty zone's do. It rehearses a run that trains on with fewer nodes.
NO_CAPACITY = "no-capacity"


class LocalProvider(Provider, ReadsHostKeys, RemovesNodes, PlansResources):
    name = "local"
    shares_host = True
    notice_source = LOCAL.notices

    def __init__(self, root: Path, events: Callable[[str], None] = lambda _m: None) -> None:
        self.root = root
        self.events = events

    # --- layout -----------------------------------------------------------------------------
    def cluster_dir(self, cluster: str) -> Path:
        return self.root / "clusters" / cluster

    def node_paths(self, cluster: str, node: str) -> NodePaths:
        return NodePaths(self.cluster_dir(cluster) / node)

    def hosts_file(self, cluster: str) -> Path:
        return self.cluster_dir(cluster) / "hosts"

    @property
    def image_root(self) -> Path:
        return self.root / "images"

    @property
    def empty_lower(self) -> Path:
        return self.root / "empty"

    @contextmanager
    def _host_lock(self) -> Iterator[None]:
        """Address allocation and the shared bridge are host-wide; serialise clusters on them."""
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "host.lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    # --- checks -----------------------------------------------------------------------------
    def preflight(self, cluster: ClusterConfig, *, for_plan: bool = False) -> list[str]:
        if os.geteuid() != 0:
            raise ConfigError("the local provider needs root (it creates network namespaces and mounts)",
                              hint="run it as root, e.g. with sudo")
        missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
        if not os.access(SSHD, os.X_OK):
            missing.append(SSHD)
        if shutil.which("taskset") is None:
            missing.append("taskset")
        if missing:
            raise ConfigError(f"the local provider needs {', '.join(missing)}, which this machine lacks",
                              hint="apt-get install iproute2 util-linux openssh-server openssh-client tar nftables")
        self._check_subnet(cluster.section(LocalSettings).subnet)
        net.check_free_addresses(cluster.section(LocalSettings).subnet, cluster.nodes)
        if cluster.ssh.user != "root":
            raise ConfigError(f"ssh.user: the local provider logs in as root (got {cluster.ssh.user!r})",
                              hint="remove ssh.user or set it to root")
        return []

    def _check_subnet(self, subnet: str) -> None:
        import ipaddress

        ours = net.bridge_name(subnet)
        routes = json.loads(net.sh(["ip", "-j", "-4", "route", "show"], check=False).stdout or "[]")
        for route in routes:
            dst = route.get("dst", "")
            if dst in ("default", "") or route.get("dev") == ours:
                continue
            if ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32").overlaps(ipaddress.IPv4Network(subnet)):
                raise ConfigError(f"local.subnet {subnet} overlaps {dst} on {route.get('dev')}",
                                  hint="choose another private local.subnet")

    # --- resources --------------------------------------------------------------------------
    def prepare(self, cluster: ClusterConfig, public_key: str) -> Prepared:
        self.empty_lower.mkdir(parents=True, exist_ok=True)
        self.cluster_dir(cluster.name).mkdir(parents=True, exist_ok=True)
        self.hosts_file(cluster.name).touch()
        (self.cluster_dir(cluster.name) / "authorized_keys").write_text(public_key + "\n")
        with self._host_lock():
            created = net.ensure_bridge(cluster.section(LocalSettings).subnet)
        return Prepared({"bridge": [net.bridge_name(cluster.section(LocalSettings).subnet)]} if created else {})

    def planned_resources(self, cluster: ClusterConfig) -> list[PlannedResource]:
        subnet = cluster.section(LocalSettings).subnet
        bridge = net.bridge_name(subnet)
        exists = net.sh(["ip", "link", "show", bridge], check=False).returncode == 0
        return [PlannedResource("bridge", bridge, "reuse" if exists else "create", subnet),
                PlannedResource("namespaces", f"xc-{cluster.name}-node0..{cluster.nodes - 1}", "create",
                                "one sshd per node, no route off the bridge")]

    def launch(self, request: LaunchRequest) -> list[Node]:
        cluster, count, image, first_index = request.cluster, request.count, request.image, request.first_index
        if (self.cluster_dir(cluster.name) / NO_CAPACITY).exists():
            raise ProviderError(f"no capacity for {count} more node(s) of cluster {cluster.name}: "
                                f"{self.cluster_dir(cluster.name) / NO_CAPACITY} says so",
                                hint="remove that file to let nodes launch again")
        names = [f"node{first_index + i}" for i in range(count)]
        with self._host_lock():
            ips = net.allocate_ips(cluster.section(LocalSettings).subnet, count)
            for name, ip in zip(names, ips, strict=True):
                net.create_namespace(net.netns_name(cluster.name, name), net.veth_name(cluster.name, name),
                                     ip, cluster.section(LocalSettings).subnet)
        self._write_hosts(cluster.name)
        lower = self._image_home(image) if image else self.empty_lower
        with ThreadPoolExecutor(max_workers=min(16, count)) as pool:
            starts = [pool.submit(self._start_node, cluster, name, ip, lower, request.role, index)
                      for index, (name, ip) in enumerate(zip(names, ips, strict=True), start=first_index)]
        for start in starts:
            start.result()
        return [self._node(cluster.name, name, ip) for name, ip in zip(names, ips, strict=True)]

    def _start_node(self, cluster: ClusterConfig, name: str, ip: str, lower: Path, role: Role, index: int) -> None:
        paths = self.node_paths(cluster.name, name)
        for folder in (paths.root, paths.upper, paths.work):
            folder.mkdir(parents=True, exist_ok=True)
        os.chmod(paths.upper, 0o700)
        paths.meta.write_text(json.dumps({"role": role, "lower": str(lower), "ip": ip}))
        paths.hostname.write_text(name + "\n")
        self._install_authorized_key(cluster.name, paths)
        if not paths.host_key.exists():
            net.sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(paths.host_key)])
        paths.sshd_config.write_text(sshd_config(ip, paths))
        Path("/run/sshd").mkdir(exist_ok=True)
        argv = ["ip", "netns", "exec", net.netns_name(cluster.name, name), "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", node_boot_script(name, self.hosts_file(cluster.name),
                                                                         paths, lower)]
        cpus = cpu_list(cluster.section(LocalSettings).cpus_per_node, cluster.nodes, index)
        if cpus:
            argv = ["taskset", "-c", cpus, *argv]
        net.sh(argv)

    def _install_authorized_key(self, cluster: str, paths: NodePaths) -> None:
        ssh_dir = paths.upper / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        target = ssh_dir / "authorized_keys"
        shutil.copyfile(self.cluster_dir(cluster) / "authorized_keys", target)
        os.chmod(target, 0o600)

    def _write_hosts(self, cluster: str) -> None:
        nodes = [(info.ip, info.node) for info in net.cluster_namespaces(cluster) if info.ip]
        lines = ["127.0.0.1 localhost"] + [f"{ip} {name}" for ip, name in nodes]
        # torch's TCPStore reverse-resolves peers in IPv4-mapped IPv6 form; with no DNS on the
        # bridge only this file can answer, else every rank warns that it cannot name its peer.
        lines += [f"::ffff:{ip} {name}" for ip, name in nodes]
        hosts = self.hosts_file(cluster)
        # Rewritten in place: every node bind-mounts this inode as /etc/hosts.
        with open(hosts, "r+" if hosts.exists() else "w") as handle:
            handle.seek(0)
            handle.truncate()
            handle.write("\n".join(lines) + "\n")

    def _node(self, cluster: str, name: str, ip: str | None) -> Node:
        paths = self.node_paths(cluster, name)
        role = Role.MASTER if name == "node0" else Role.WORKER
        return Node(name=name, id=net.netns_name(cluster, name), private_ip=ip or "", ssh_host=ip or "",
                    role=role, market=self.name, zone=None, instance_type=None,
                    state=NodeState.RUNNING if sshd_pid(paths) else NodeState.STOPPED)

    def nodes(self, cluster: ClusterConfig, priced: bool = True) -> list[Node]:
        return [self._node(cluster.name, info.node, info.ip) for info in net.cluster_namespaces(cluster.name)]

    def host_keys(self, node: Node) -> list[str]:
        cluster, _, name = node.id[len(net.NETNS_PREFIX):].rpartition("-")
        pub = self.node_paths(cluster, name).host_key.with_suffix(".pub")
        return [" ".join(pub.read_text().split()[:2])] if pub.exists() else []

    def remove_node(self, cluster: ClusterConfig, node: Node) -> Removed:
        ns = net.netns_name(cluster.name, node.name)
        pids = [str(p) for p in net.namespace_pids(ns)]
        net.delete_namespace(ns)
        net.sh(["ip", "link", "del", net.veth_name(cluster.name, node.name)], check=False)
        paths = self.node_paths(cluster.name, node.name)
        net.kill_pids(stray_sshd_pids(paths.root))
        remove_tree(paths.root)
        self._write_hosts(cluster.name)
        net.forget_address(node.private_ip, [info.name for info in net.cluster_namespaces(cluster.name)])
        return Removed({"namespaces": [ns], "processes": pids})

    def terminate(self, cluster: ClusterConfig) -> Removed:
        if os.geteuid() != 0:
            raise ConfigError("the local provider needs root to remove a local cluster (namespaces, mounts)",
                              hint=f"run it as root, e.g. `sudo xeoncluster down --name {cluster.name}`")
        removed: dict[str, list[str]] = {"namespaces": [], "processes": [], "bridge": []}
        for info in net.cluster_namespaces(cluster.name):
            removed["processes"] += [str(p) for p in net.namespace_pids(info.name)]
            net.delete_namespace(info.name)
            removed["namespaces"].append(info.name)
        stray = stray_sshd_pids(self.cluster_dir(cluster.name))
        net.kill_pids(stray)
        removed["processes"] += [str(p) for p in stray]
        remove_tree(self.cluster_dir(cluster.name))
        with self._host_lock():
            net.delete_cluster_veths(cluster.name, cluster.section(LocalSettings).subnet)
            removed["bridge"] = net.remove_bridge_if_unused(cluster.section(LocalSettings).subnet)
        return Removed({k: v for k, v in removed.items() if v})

    # --- images -----------------------------------------------------------------------------
    def _image_home(self, image: Image) -> Path:
        return self.image_root / image.id / "home"

    def images(self) -> list[Image]:
        found = []
        for meta in sorted(self.image_root.glob("*/image.json")):
            data = json.loads(meta.read_text())
            found.append(Image(id=data["id"], key=data["key"], name=data["name"], created=data.get("created"),
                               cluster=data.get("cluster"), size_bytes=data.get("size_bytes")))
        return found

    def find_image(self, key: str) -> Image | None:
        return next((image for image in self.images() if image.key == key), None)

    def get_image(self, image_id: str) -> Image | None:
        return next((image for image in self.images() if image.id == image_id), None)

    def bake(self, cluster: ClusterConfig, node: Node, key: str,
             on_snapshot: Callable[[], None] | None = None) -> Image:
        """Like an AMI bake with a reboot: stop the node, move its home layer into the image, restart it.

        Moving instead of copying keeps a bake at well under a second and leaves no second copy of
        the venv to delete on `down`. .ssh and caches stay behind: no key goes into an image.
        """
        image_id = f"local-{key[:16]}"
        self._refuse_if_in_use(image_id, "bake over it")
        paths = self.node_paths(cluster.name, node.name)
        ns = net.netns_name(cluster.name, node.name)
        net.kill_pids(net.namespace_pids(ns))
        staging = self.image_root / f".{image_id}.{os.getpid()}"
        remove_tree(staging)
        staging.mkdir(parents=True)
        paths.upper.rename(staging / "home")
        for private in (".ssh", ".cache"):
            remove_tree(staging / "home" / private)
        size = sum(f.stat().st_size for f in (staging / "home").rglob("*") if f.is_file() and not f.is_symlink())
        meta = {"id": image_id, "key": key, "name": f"xeoncluster-{cluster.stack}-{key[:12]}",
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cluster": cluster.name,
                "size_bytes": size}
        (staging / "image.json").write_text(json.dumps(meta, indent=2))
        remove_tree(self.image_root / image_id)
        staging.rename(self.image_root / image_id)
        remove_tree(paths.work)
        image = self.get_image(image_id)
        assert image is not None
        self._start_node(cluster, node.name, node.private_ip, self._image_home(image), node.role, node.index)
        wait_for_port(node.private_ip, 22, timeout=30)
        if on_snapshot is not None:
            on_snapshot()
        return image

    def remove_image(self, image_id: str) -> Removed:
        folder = self.image_root / image_id
        if not (folder / "image.json").exists():
            return Removed()
        self._refuse_if_in_use(image_id, "remove it")
        remove_tree(folder)
        return Removed({"images": [image_id]})

    def _image_users(self, image_id: str) -> list[str]:
        """`cluster/node` of every node whose home overlays this image."""
        home = str(self.image_root / image_id / "home")
        users = []
        for meta in self.root.glob("clusters/*/*/node.json"):
            try:
                lower = json.loads(meta.read_text()).get("lower")
            except (OSError, ValueError):
                continue
            if lower == home:
                users.append(f"{meta.parent.parent.name}/{meta.parent.name}")
        return sorted(users)

    def _refuse_if_in_use(self, image_id: str, action: str) -> None:
        users = self._image_users(image_id)
        if users:
            raise ProviderError(f"image {image_id} is in use by running nodes ({', '.join(users)}); "
                                f"refusing to {action}", hint="remove the cluster that uses it first")


def make(config: ClusterConfig, events: Callable[[str], None]) -> LocalProvider:
    return LocalProvider(config.section(LocalSettings).root, events=events)
