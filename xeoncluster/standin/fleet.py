"""The data plane: every instance moto launches becomes a booted container. Boots, terminations,
bakes and spot interruptions run in background threads so the API answers promptly; moto's view
is kept in step through the small `MotoView` interface (moto_hooks implements it)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from xeoncluster.standin.containers import Container, remove_tree
from xeoncluster.standin.cpu_share import least_used_cpu
from xeoncluster.standin.faults import Faults
from xeoncluster.standin.images import ImageStore
from xeoncluster.standin.network import Network
from xeoncluster.standin.seed import Seed, write_seed

SPOT_TERMINATION = ("Server.SpotInstanceTermination", "Server.SpotInstanceTermination: Spot instance termination")
CRASHED = ("Server.InternalError", "Server.InternalError: the instance's container did not boot")
SHUTDOWN = ("Client.InstanceInitiatedShutdown", "Client.InstanceInitiatedShutdown: Instance initiated shutdown")


class MotoView(Protocol):
    def set_state(self, instance: Any, name: str) -> None: ...
    def set_terminated(self, instance: Any, reason: tuple[str, str] | None) -> None: ...
    def set_stopped(self, instance: Any, reason: tuple[str, str]) -> None: ...
    def set_image_state(self, ami: Any, name: str) -> None: ...


# EC2's GetConsoleOutput without Latest=True returns output "buffered shortly after an instance
# transition state", long before cloud-init prints the host keys at the end of boot; only
# Latest=True returns the console as it is now.
BOOT_CONSOLE_SECONDS = 1.0


@dataclass(frozen=True)
class Launch:
    """What the data plane needs from moto's instance to boot it."""
    instance: Any
    instance_id: str
    image_id: str
    private_ip: str
    public_ip: str | None
    public_key: str | None
    group_ids: tuple[str, ...]
    shutdown_behavior: str


@dataclass
class Node:
    launch: Launch
    container: Container
    state: str = "pending"          # pending, running, shutting-down, stopped, gone
    notice: dict[str, str] | None = None
    rebalance: dict[str, str] | None = None  # EC2's rebalance recommendation, once `rebalance` set it
    boot_started: float | None = None
    cpu: int | None = None  # the CPU its container is confined to while it runs
    boot_console: str = ""  # what GetConsoleOutput without Latest=True returns: see BOOT_CONSOLE_SECONDS
    # Held while an image copies the disk: like an EBS snapshot, it completes even if the
    # instance is terminated meanwhile (the disk is deleted only afterwards).
    disk_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass
class Fleet:
    net: Network
    instances_dir: Path
    images: ImageStore
    faults: Callable[[], Faults]
    moto: MotoView
    log: Callable[[str], None]
    mirror_url: str
    nodes: dict[str, Node] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    closing: threading.Event = field(default_factory=threading.Event, repr=False)

    # -- launch ---------------------------------------------------------------------------------
    def launch(self, launch: Launch) -> None:
        chain = self.images.chain(launch.image_id) or self.images.chain("base")
        container = Container(launch.instance_id, self.instances_dir / launch.instance_id, chain or ())
        node = Node(launch, container)
        with self.lock:
            self.nodes[launch.instance_id] = node
        self.moto.set_state(launch.instance, "pending")
        self._spawn(self._boot, node)

    def _boot(self, node: Node) -> None:
        faults = self.faults()
        self._sleep(faults.scaled(faults.boot_seconds))
        launch, container = node.launch, node.container
        if node.state != "pending":
            return  # terminated while pending
        try:
            container.create_disk()
            write_seed(container.upper, Seed(launch.instance_id, launch.private_ip, self.net.prefixlen,
                                             self.net.gateway, self.net.dns, launch.public_ip, launch.public_key,
                                             faults.dpkg_lock_seconds,
                                             self.mirror_url if faults.preseed_mirror else None))
            container.mount()
            if launch.public_ip:
                self.net.route_public(launch.public_ip)
            with self.lock:
                if node.state != "pending":
                    return  # terminated while pending: _teardown cleans up
                node.cpu = least_used_cpu(n.cpu for n in self.nodes.values()
                                          if n.state == "running" and n.cpu is not None)
                container.boot(self.net.bridge, node.cpu)
                node.state, node.boot_started = "running", time.time()
            self.moto.set_state(launch.instance, "running")
            self._spawn(self._buffer_console, node)
            self.log(f"{launch.instance_id}: booting at {launch.private_ip} from {launch.image_id} on CPU {node.cpu}")
        except Exception as exc:  # noqa: BLE001 - reported through moto, like a failed EC2 launch
            self.log(f"{launch.instance_id}: boot failed: {exc}")
            if node.state == "pending":  # else a termination raced the boot and cleans up itself
                self._finish(node, CRASHED)

    def _buffer_console(self, node: Node) -> None:
        self._sleep(BOOT_CONSOLE_SECONDS)
        node.boot_console = node.container.console_text()

    # -- terminate ------------------------------------------------------------------------------
    def terminating(self, instance_ids: list[str]) -> None:
        """After moto's TerminateInstances: shutting-down until the container is gone."""
        for node in self._nodes(instance_ids):
            with self.lock:
                if node.state == "gone":
                    continue
                node.state = "shutting-down"
            self.moto.set_state(node.launch.instance, "shutting-down")
            self._spawn(self._finish, node, None)

    def _finish(self, node: Node, reason: tuple[str, str] | None) -> None:
        with self.lock:
            node.state = "shutting-down"
        started = time.monotonic()
        self._halt(node)
        with self.lock:
            node.state = "gone"
            others = [n.container for n in self.nodes.values() if n.state == "running"]
        for container in others:
            container.forget_neighbour(node.launch.private_ip)
        # The namespace's own cache too: IMDS and moto answer from it, and a later instance at this
        # address would wait for replies sent to the old MAC.
        self.net.ip("neigh", "flush", "to", node.launch.private_ip, check=False)
        self.moto.set_terminated(node.launch.instance, reason)
        halted = time.monotonic()
        with node.disk_lock:
            remove_tree(node.container.root)
        self.images.collect(self.chains_in_use())
        self.log(f"{node.launch.instance_id}: terminated" + (f" ({reason[0]})" if reason else "")
                 + f"; container stopped in {halted - started:.1f} s, "
                   f"disk removed in {time.monotonic() - halted:.1f} s")

    def _halt(self, node: Node) -> None:
        node.container.halt()
        if node.launch.public_ip:
            self.net.unroute_public(node.launch.public_ip)

    def _teardown(self, node: Node) -> None:
        self._halt(node)
        with node.disk_lock:
            remove_tree(node.container.root)

    def shutting_down_groups(self) -> set[str]:
        with self.lock:
            return {g for n in self.nodes.values() if n.state == "shutting-down" for g in n.launch.group_ids}

    # -- spot interruption ----------------------------------------------------------------------
    def interrupt(self, instance_id: str, seconds: float | None) -> dict[str, str]:
        faults = self.faults()
        delay = faults.scaled(faults.spot_notice_seconds) if seconds is None else seconds
        node = self._node(instance_id)
        when = datetime.now(UTC) + timedelta(seconds=delay)
        node.notice = {"action": "terminate", "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
        self._spawn(self._reclaim, node, delay)
        return node.notice

    def recommend_rebalance(self, instance_id: str) -> dict[str, str]:
        """EC2's rebalance recommendation: an elevated risk of interruption, often before the notice."""
        node = self._node(instance_id)
        node.rebalance = {"noticeTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        return node.rebalance

    def _reclaim(self, node: Node, delay: float) -> None:
        self._sleep(delay)
        with self.lock:
            if node.state in ("shutting-down", "gone"):
                return
        self._finish(node, SPOT_TERMINATION)

    # -- images ---------------------------------------------------------------------------------
    def bake(self, ami: Any, instance_id: str) -> None:
        """The layer is copied before CreateImage answers: an EBS snapshot is of the disk as it was when
        the call was made, and the caller puts back at once what it kept out of the image (the machine
        id, its keys), which a copy still running would take in."""
        node = self._node(instance_id)
        self.moto.set_image_state(ami, "pending")
        started = time.monotonic()
        with node.disk_lock:  # a TerminateInstances right after waits for the copy
            try:
                self.images.snapshot(ami.id, node.container.upper, node.container.lowers)
            except Exception as exc:  # noqa: BLE001 - EC2 reports a failed image as state "failed"
                self.log(f"{ami.id}: snapshot of {node.launch.instance_id} failed: {exc}")
                self.moto.set_image_state(ami, "failed")
                return
        self._spawn(self._finish_image, ami, started)

    def _finish_image(self, ami: Any, started: float) -> None:
        self.images.collect(self.chains_in_use())  # deregistered while it was being copied
        took = time.monotonic() - started
        faults = self.faults()
        self._sleep(faults.scaled(faults.ami_seconds) - took)
        self.moto.set_image_state(ami, "available")
        self.log(f"{ami.id}: available (layer copied in {took:.1f} s)")

    def deregistered(self, ami_id: str) -> None:
        self.images.deregister(ami_id)
        self.images.collect(self.chains_in_use())

    def chains_in_use(self) -> list[tuple[Path, ...]]:
        with self.lock:
            return [n.container.lowers for n in self.nodes.values() if n.state != "gone"]

    # -- views ----------------------------------------------------------------------------------
    def console(self, instance_id: str, latest: bool) -> str:
        node = self.nodes.get(instance_id)
        if node is None:
            return ""
        return node.container.console_text() if latest else node.boot_console

    def by_address(self, address: str) -> Node | None:
        with self.lock:
            return next((n for n in self.nodes.values() if n.state == "running"
                         and address in (n.launch.private_ip, n.launch.public_ip)), None)

    def summary(self) -> list[dict[str, Any]]:
        with self.lock:
            return [{"instance_id": i, "state": n.state, "private_ip": n.launch.private_ip,
                     "public_ip": n.launch.public_ip, "image_id": n.launch.image_id,
                     "pid": n.container.process.pid if n.container.process else None, "cpu": n.cpu}
                    for i, n in self.nodes.items()]

    # -- crash watch and shutdown ---------------------------------------------------------------
    def watch(self, interval: float = 1.0) -> None:
        """A container that stopped by itself (crash, `poweroff`) ends as its shutdown behaviour says."""
        while not self.closing.wait(interval):
            with self.lock:
                dead = [n for n in self.nodes.values() if n.state == "running" and not n.container.running()]
                for node in dead:
                    node.state = "shutting-down"
            for node in dead:
                self.log(f"{node.launch.instance_id}: container exited by itself")
                self._spawn(self._ended, node)

    def _ended(self, node: Node) -> None:
        """Shut down from inside (poweroff, crash): InstanceInitiatedShutdownBehavior decides."""
        if node.launch.shutdown_behavior == "terminate":
            return self._finish(node, SHUTDOWN)
        self._halt(node)  # the disk stays until TerminateInstances or `stop`
        with self.lock:
            node.state = "stopped"
        self.moto.set_stopped(node.launch.instance, SHUTDOWN)

    def shutdown(self) -> None:
        self.closing.set()
        with self.lock:
            live = [n for n in self.nodes.values() if n.state != "gone"]
            for node in live:
                node.state = "shutting-down"
        with ThreadPoolExecutor(max(1, len(live))) as pool:
            list(pool.map(self._teardown, live))

    # -- helpers --------------------------------------------------------------------------------
    def _node(self, instance_id: str) -> Node:
        with self.lock:
            node = self.nodes.get(instance_id)
        if node is None or node.state == "gone":
            raise KeyError(f"no live stand-in instance {instance_id}")
        return node

    def _nodes(self, instance_ids: list[str]) -> list[Node]:
        with self.lock:
            return [self.nodes[i] for i in instance_ids if i in self.nodes]

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.closing.wait(seconds)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        threading.Thread(target=target, args=args, daemon=True).start()
