"""Training throughput (train samples/s from metrics.json) on local nodes pinned to one core each.

(a) scaling: 2 nodes x 1 core against 1 node x 1 core, same per-rank batch -> efficiency = s2 / (2 s1)
(b) tuning: our computed environment against plain defaults (`train --no-tune`) on the same 2 nodes

Both ratios come from one run of this script. On this 2-core machine they are rough: the two
"nodes" share one memory bus and caches, and gloo runs over a veth bridge, not a real network.

    python benchmarks/bench_train.py [--steps 40] [--batch 8]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SUBNET = "10.216.0.0/24"


class Bench:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.config = workdir / "cluster-pinned.yaml"
        self.config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {workdir / 'root'}\n"
                               "  cpus_per_node: 1\n")
        self.env = {**os.environ, "XEONCLUSTER_HOME": str(workdir / "home")}

    def cli(self, *args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "provisioner.cli", "--config", str(self.config), *args],
                              env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"xeoncluster {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc.stdout

    def train(self, cluster: str, run: str, steps: int, batch: int, tuned: bool = True) -> dict[str, object]:
        args = ["train", "squad", "--name", cluster, "--demo", "--run", run]
        if not tuned:
            args.append("--no-tune")
        self.cli(*args, "--", "--max-steps", str(steps), "--batch-size", str(batch), "--no-eval-before")
        path = self.workdir / "home" / "clusters" / cluster / "runs" / run / "metrics.json"
        return json.loads(path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8, help="per-rank batch size")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "xeoncluster-bench")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.workdir)
    results: dict[str, dict[str, object]] = {}
    try:
        bench.cli("up", "--name", "bt1", "--nodes", "1")
        bench.train("bt1", "warmup", 4, args.batch)
        results["1 node"] = bench.train("bt1", "one", args.steps, args.batch)
        bench.cli("down", "--name", "bt1")
        bench.cli("up", "--name", "bt2", "--nodes", "2")
        bench.train("bt2", "warmup", 4, args.batch)
        results["2 nodes tuned"] = bench.train("bt2", "tuned", args.steps, args.batch)
        results["2 nodes untuned"] = bench.train("bt2", "untuned", args.steps, args.batch, tuned=False)
    finally:
        bench.cli("down", "--name", "bt1")
        bench.cli("down", "--name", "bt2")
    sps = {k: float(v["train_samples_per_second"]) for k, v in results.items()}  # type: ignore[arg-type]
    report = {
        "benchmark": "training throughput, local nodes pinned to 1 core each, squad demo",
        "steps": args.steps,
        "per_rank_batch": args.batch,
        "samples_per_second": {k: round(v, 2) for k, v in sps.items()},
        "threads_per_rank": {k: v.get("threads_per_rank") for k, v in results.items()},
        "scaling_efficiency_2_vs_1": round(sps["2 nodes tuned"] / (2 * sps["1 node"]), 3),
        "speedup_2_vs_1": round(sps["2 nodes tuned"] / sps["1 node"], 3),
        "tuned_vs_untuned": round(sps["2 nodes tuned"] / sps["2 nodes untuned"], 3),
    }
    print(json.dumps(report, indent=2))
    print()
    print("| run                        | samples/s |")
    print("|----------------------------|-----------|")
    for key, value in sps.items():
        print(f"| {key:26} | {value:9.2f} |")
    print(f"| speedup 2 vs 1 node        | {report['speedup_2_vs_1']:9.3f} |")
    print(f"| scaling efficiency         | {report['scaling_efficiency_2_vs_1']:9.3f} |")
    print(f"| tuned / untuned            | {report['tuned_vs_untuned']:9.3f} |")


if __name__ == "__main__":
    main()
