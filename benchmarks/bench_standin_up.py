"""Cold `up` on the EC2 stand-in for 1, 2 and 4 nodes per image strategy (bake-first, parallel),
with its time split by step; warm `up` (the image ready: the same path for both strategies); and,
after a cold `parallel` up, an `up` right after it (down, then up while its AMI is still pending),
which must not take longer than the cold one.

The latency model is EC2's: an instance boots in 20 s and an AMI is available 120 s after
CreateImage, divided by --scale (default 1: unscaled). Ratios measured in one run are the figures
that matter: t(4)/t(1) warm, and parallel/bake-first cold. Every "instance" is a container on this
machine, so what real instances do on their own CPUs (booting, pip install) shares its cores here.

Needs root and what scripts/install.sh installs. Starts its own stand-in and stops it at the end.

    python benchmarks/bench_standin_up.py [--scale 1] [--nodes 1 2 4] [--strategies bake-first parallel]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STANDIN = REPO / "scripts" / "aws-standin.sh"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from standin_account import create_boundary  # noqa: E402 - beside this script

STEP = re.compile(r"^==> (.+)$")
DONE = re.compile(r"^\s+done \((\d+\.\d+)s\)$")


@dataclass
class UpRun:
    strategy: str
    nodes: int
    kind: str  # cold | warm | after-cold
    seconds: float
    steps: dict[str, float] = field(default_factory=dict)


def standin(*args: str) -> str:
    return subprocess.run([str(STANDIN), *args], check=True, capture_output=True, text=True).stdout


def steps_of(stderr: str) -> dict[str, float]:
    """Each `==> step` and the `done (Xs)` that closes it, as the CLI prints them without a terminal."""
    found, current = {}, None
    for line in stderr.splitlines():
        if match := STEP.match(line):
            current = match.group(1)
        elif (match := DONE.match(line)) and current:
            found[re.sub(r"\d+ worker", "N worker", current)] = float(match.group(1))
    return found


def up(home: Path, config: Path, name: str, nodes: int, strategy: str, kind: str) -> UpRun:
    with_strategy = home / f"{strategy}.yaml"
    with_strategy.write_text(config.read_text() + f"image_strategy: {strategy}\n")
    argv = [str(STANDIN), "run", "--", sys.executable, "-m", "xeoncluster.cli", "--config", str(with_strategy),
            "up", "--name", name, "--nodes", str(nodes)]
    env = {**os.environ, "XEONCLUSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=home)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"up {name} failed:\n{proc.stderr[-3000:]}")
    return UpRun(strategy, nodes, kind, round(elapsed, 2), steps_of(proc.stderr))


def down(home: Path, config: Path, name: str, purge: bool) -> None:
    subprocess.run([str(STANDIN), "run", "--", sys.executable, "-m", "xeoncluster.cli", "--config", str(config),
                    "down", "--name", name, *(["--purge-images"] if purge else [])],
                   env={**os.environ, "XEONCLUSTER_HOME": str(home), "PYTHONPATH": str(REPO)},
                   check=True, capture_output=True, cwd=home)


def measure(home: Path, config: Path, strategy: str, sizes: list[int]) -> list[UpRun]:
    runs = []
    for nodes in sizes:
        # One name for cold and warm: `down --purge-images` removes the images this cluster name
        # baked, so the next cold up bakes again.
        name = f"b{strategy[0]}{nodes}"
        cold = up(home, config, name, nodes, strategy, "cold")
        if "image: bake" not in cold.steps:
            raise SystemExit(f"{name}: the cold up found an image to reuse; the measurement is not cold")
        runs.append(cold)
        down(home, config, name, purge=False)
        # bake-first leaves a ready image (warm); parallel leaves one still baking (right after).
        runs.append(up(home, config, name, nodes, strategy, "warm" if strategy == "bake-first" else "after-cold"))
        down(home, config, name, purge=True)
    return runs


def table(runs: list[UpRun], sizes: list[int]) -> str:
    lines = [f"{'up':18} " + " ".join(f"{n:>3} node(s)" for n in sizes) + "  t(4)/t(1)"]
    for label, kind, strategy in (("cold, bake-first", "cold", "bake-first"), ("cold, parallel", "cold", "parallel"),
                                  ("warm (image ready)", "warm", None),
                                  ("right after parallel", "after-cold", "parallel")):
        times = {r.nodes: r.seconds for r in runs if r.kind == kind and strategy in (None, r.strategy)}
        if not times:
            continue
        ratio = times[sizes[-1]] / times[sizes[0]] if sizes[0] in times and sizes[-1] in times else 0
        lines.append(f"{label:18} " + " ".join(f"{times.get(n, 0):>10.1f}s" for n in sizes) + f"  {ratio:9.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--strategies", nargs="+", default=["bake-first", "parallel"])
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="xc-bench-standin-"))
    standin("stop")
    standin("start", "--scale", str(args.scale))
    try:
        create_boundary(home)
        config = Path(standin("config").strip())
        runs = [run for strategy in args.strategies for run in measure(home, config, strategy, args.nodes)]
    finally:
        standin("stop")
    cold = {(r.strategy, r.nodes): r.seconds for r in runs if r.kind == "cold"}
    largest = args.nodes[-1]
    summary = {"scale": args.scale, "boot_seconds": 20 / args.scale, "ami_seconds": 120 / args.scale,
               "runs": [asdict(r) for r in runs]}
    summary["cold_parallel_over_bake_first"] = {
        str(n): round(cold[("parallel", n)] / cold[("bake-first", n)], 3)
        for n in args.nodes if ("parallel", n) in cold and ("bake-first", n) in cold}
    after = {r.nodes: r.seconds for r in runs if r.kind == "after-cold"}
    summary["after_cold_over_cold_parallel"] = {str(n): round(after[n] / cold[("parallel", n)], 3)
                                                for n in after if ("parallel", n) in cold}
    warm = {r.nodes: r.seconds for r in runs if r.kind == "warm"}
    if args.nodes[0] in warm and largest in warm:
        summary["warm_t_largest_over_t_smallest"] = round(warm[largest] / warm[args.nodes[0]], 3)
    print(json.dumps(summary, indent=2))
    print(table(runs, args.nodes))
    for run in runs:
        if run.kind in ("cold", "after-cold"):
            print(f"{run.kind} {run.strategy} {run.nodes} node(s): "
                  + ", ".join(f"{k} {v:.1f}s" for k, v in run.steps.items()))


if __name__ == "__main__":
    main()
