"""Wall time of `up` with a warm image for 1, 2 and 4 local nodes, and of `exec` fan-out on 1 and 4.

Each figure is the median of --repeat runs of the real CLI. The ratios t(4)/t(1) are what matter:
node setup is parallel, so adding nodes should cost little. Prints JSON, then a table.

    python benchmarks/bench_local_up.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBNET = "10.215.0.0/24"


def cli(env: dict[str, str], config: Path, *args: str) -> float:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "xeoncluster.cli", "--config", str(config), *args],
                          env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"xeoncluster {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def median_up(env: dict[str, str], config: Path, nodes: int, repeat: int) -> float:
    times = []
    for i in range(repeat):
        name = f"bench{nodes}x{i}"
        try:
            times.append(cli(env, config, "up", "--name", name, "--nodes", str(nodes)))
        finally:
            cli(env, config, "down", "--name", name)
    return statistics.median(times)


def median_exec(env: dict[str, str], config: Path, nodes: int, repeat: int) -> float:
    name = f"benchexec{nodes}"
    cli(env, config, "up", "--name", name, "--nodes", str(nodes))
    try:
        return statistics.median(cli(env, config, "exec", "--name", name, "--", "sleep 1; hostname")
                                 for _ in range(repeat))
    finally:
        cli(env, config, "down", "--name", name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "xeoncluster-bench",
                        help="kept between runs so the image is baked only once")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    config = args.workdir / "cluster.yaml"
    config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {args.workdir / 'root'}\n")
    env = {**os.environ, "XEONCLUSTER_HOME": str(args.workdir / "home")}
    warm = cli(env, config, "up", "--name", "benchwarm", "--nodes", "1")
    cli(env, config, "down", "--name", "benchwarm")

    up = {n: median_up(env, config, n, args.repeat) for n in (1, 2, 4)}
    fan = {n: median_exec(env, config, n, args.repeat) for n in (1, 4)}
    result = {
        "benchmark": "local up (warm image) and exec fan-out",
        "repeat": args.repeat,
        "warmup_up_seconds": round(warm, 2),
        "up_seconds": {str(n): round(t, 2) for n, t in up.items()},
        "exec_seconds": {str(n): round(t, 2) for n, t in fan.items()},
        "up_ratio_4_to_1": round(up[4] / up[1], 2),
        "exec_ratio_4_to_1": round(fan[4] / fan[1], 2),
        "target_ratio": 1.5,
    }
    print(json.dumps(result, indent=2))
    print()
    print("| measure                 | 1 node | 2 nodes | 4 nodes | t(4)/t(1) |")
    print("|-------------------------|--------|---------|---------|-----------|")
    print(f"| up, warm image (s)      | {up[1]:6.2f} | {up[2]:7.2f} | {up[4]:7.2f} "
          f"| {result['up_ratio_4_to_1']:9.2f} |")
    print(f"| exec `sleep 1` (s)      | {fan[1]:6.2f} |       - | {fan[4]:7.2f} | {result['exec_ratio_4_to_1']:9.2f} |")


if __name__ == "__main__":
    main()
