"""`python -m xeoncluster.node.usage`: one sample of this node's use, as one JSON line, for the run agent.

It counts the processes this user can see in this shell's network namespace: on a cloud node that is
the node; on a local node (a namespace on a shared machine) it is that node's sshd and everything it
started, ranks included. The agent turns two samples into rates. Standard library only, fast to start.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


def _own_processes() -> list[Path]:
    mine = os.readlink("/proc/self/ns/net")
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.readlink(proc / "ns" / "net") == mine:
                found.append(proc)
        except OSError:
            continue
    return found


def _ticks_and_rss(procs: list[Path]) -> tuple[int, int]:
    ticks = rss = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for proc in procs:
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            rss_pages = int((proc / "statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        rss += rss_pages * page
    return ticks, rss


def _network() -> tuple[int, int]:
    rx = tx = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, counters = line.partition(":")
        values = counters.split()
        if name.strip() != "lo" and len(values) >= 9:
            rx, tx = rx + int(values[0]), tx + int(values[8])
    return rx, tx


def _mem_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def sample() -> dict[str, float]:
    ticks, rss = _ticks_and_rss(_own_processes())
    rx, tx = _network()
    return {"time": time.time(), "cpu_seconds": ticks / os.sysconf("SC_CLK_TCK"),
            "cpus": len(os.sched_getaffinity(0)), "rss": rss, "mem_total": _mem_total(), "rx": rx, "tx": tx}


if __name__ == "__main__":
    print(json.dumps(sample()))
