"""Measures bench_train.py takes beside samples/s: the link between two local nodes, what the gradient
exchange reaches on it, and the CPU that other users of this machine took during a run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from xeoncluster.providers.local import net  # light: no torch
from xeoncluster.providers.local.node import cpu_list

PROBE = Path(__file__).with_name("link_probe.py")
TCP_BYTES = 400 << 20
MB = 1e6


@dataclass(frozen=True)
class Node:
    namespace: str
    ip: str
    cpus: str

    def probe(self, *args: object) -> subprocess.Popen[str]:
        """link_probe.py in this node's network namespace, on this node's CPUs, as its ranks run."""
        argv = ["ip", "netns", "exec", self.namespace, "taskset", "-c", self.cpus, sys.executable, str(PROBE),
                *map(str, args)]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "GLOO_SOCKET_IFNAME": "eth0"})


def cluster_nodes(cluster: str, cpus_per_node: int) -> list[Node]:
    found = net.cluster_namespaces(cluster)
    return [Node(info.name, info.ip or "", cpu_list(cpus_per_node, len(found), index) or "0-1023")
            for index, info in enumerate(found)]


def _result(proc: subprocess.Popen[str]) -> dict[str, float]:
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"link_probe failed: {err[-2000:]}")
    return json.loads(out)


def _mb_per_s(result: dict[str, float]) -> float:
    return result["bytes"] / result["seconds"] / MB


def tcp_one_way(sender: Node, receiver: Node, port: int = 29600) -> float:
    """MB/s of one plain TCP stream from `sender` to `receiver`, as the receiver reads it."""
    recv = receiver.probe("recv", port, TCP_BYTES)
    send = sender.probe("send", receiver.ip, port, TCP_BYTES)
    _result(send)
    return _mb_per_s(_result(recv))


def tcp_both_ways(a: Node, b: Node, port: int = 29600) -> float:
    """MB/s in each direction with one stream each way at once: what a 2-rank all-reduce asks of the link."""
    receivers = [b.probe("recv", port, TCP_BYTES), a.probe("recv", port + 1, TCP_BYTES)]
    senders = [a.probe("send", b.ip, port, TCP_BYTES), b.probe("send", a.ip, port + 1, TCP_BYTES)]
    for proc in senders:
        _result(proc)
    return min(_mb_per_s(_result(proc)) for proc in receivers)


def gloo_alone(a: Node, b: Node, bucket_bytes: list[int], threads: int, rounds: int = 5) -> float:
    """MB/s of gloo all-reducing these buckets between the two nodes with nothing else running."""
    sizes = ",".join(str(size) for size in bucket_bytes)
    procs = [node.probe("allreduce", a.ip, rank, sizes, rounds, threads) for rank, node in enumerate((a, b))]
    return min(_mb_per_s(_result(proc)) for proc in procs)


def exchange_stats(ranks: list[dict[str, Any]], warmup: int) -> dict[str, float]:
    """What the gradient exchange reached in a run, from every rank's exchange_times file.

    A bucket counts from the moment the last rank launched it (no transfer can finish before) to the
    moment the last rank had it back; a step's exchange time is the union of its buckets' spans.
    `exposed` is the part after the last bucket was launched: the step's wait for the exchange.
    """
    steps = list(zip(*(payload["steps"] for payload in ranks), strict=True))[warmup:]
    sent = busy = exposed = 0.0
    for per_rank in steps:
        spans = [(max(b[0] for b in bucket), max(b[1] for b in bucket), bucket[0][2])
                 for bucket in zip(*per_rank, strict=True)]
        if not spans:
            continue
        sent += sum(span[2] for span in spans)
        busy += _union(spans)
        exposed += max(span[1] for span in spans) - max(span[0] for span in spans)
    count = max(1, len(steps))
    return {
        "gradient_mb_per_step": round(sent / count / MB, 2),
        "exchange_seconds_per_step": round(busy / count, 4),
        "exposed_seconds_per_step": round(exposed / count, 4),
        "exchange_mb_per_s": round(sent / busy / MB, 1) if busy else 0.0,
        "buckets_per_step": len(steps[-1][0]) if steps else 0,
    }


def bucket_sizes(ranks: list[dict[str, Any]]) -> list[int]:
    """Wire bytes of each bucket in the last step of rank 0."""
    return [int(bucket[2]) for bucket in ranks[0]["steps"][-1]]


def _union(spans: list[tuple[float, float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop, _ in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


@dataclass
class OtherLoad:
    """CPU taken outside the cluster's network namespaces while the cluster trains: other users of the
    machine (and the host's steal). On 2 cores shared by 2 one-core nodes, every bit of it slows a rank."""

    namespaces: list[str]
    busy_cores: float
    samples: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> OtherLoad:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def cores(self) -> float:
        """Mean over the seconds in which the cluster was busy training."""
        return round(sum(self.samples) / len(self.samples), 3) if self.samples else 0.0

    def _run(self) -> None:
        inodes = {os.stat(f"/run/netns/{ns}").st_ino for ns in self.namespaces}
        before, stamp = _cpu_snapshot(inodes), time.monotonic()
        while not self._stop.wait(1.0):
            after, now = _cpu_snapshot(inodes), time.monotonic()
            ticks = os.sysconf("SC_CLK_TCK") * (now - stamp)
            inside = sum(t - before[1].get(pid, t) for pid, t in after[1].items()) / ticks
            busy = (after[0] - before[0]) / ticks
            if inside >= self.busy_cores:
                self.samples.append(max(0.0, busy - inside))
            before, stamp = after, now


def _cpu_snapshot(inodes: set[int]) -> tuple[int, dict[str, int]]:
    """(machine's busy ticks outside interrupts, {pid: ticks} of processes in `inodes`' namespaces)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = fields
    inside: dict[str, int] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino not in inodes:
                continue
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        inside[pid] = int(rest[11]) + int(rest[12])
    return user + nice + system + steal, inside


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def cpu_flags_of_note() -> list[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = line.split(":", 1)[1].split()
            return [f for f in flags if f in ("avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")]
    return []
