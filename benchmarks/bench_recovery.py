"""How long a training run takes to come back after losing a node, against a warm one-node `up`
measured in the same run, and how many steps the loss cost, with and without a notice.

Local nodes (default): node1's namespace and processes vanish mid-run (no notice), or node1 gets a
stop request (what an interruption notice does: checkpoint the current step, then stop). The
recovery time is from the loss to the first step the resumed run logs.

    python benchmarks/bench_recovery.py [--steps 400] [--save-steps 40]
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
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUBNET = "10.216.0.0/24"
STEP = re.compile(r"^\[0\] step (\d+)/", re.M)


@dataclass
class Recovery:
    kind: str  # no-notice | notice
    lost_at_step: int
    recovery_seconds: float
    lost_steps: int
    restart: dict[str, object]


class Cli:
    def __init__(self, work: Path) -> None:
        self.home, self.config = work / "home", work / "cluster.yaml"
        self.home.mkdir(parents=True, exist_ok=True)
        self.config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {work / 'root'}\n")
        self.env = {**os.environ, "XEONCLUSTER_HOME": str(self.home), "PYTHONPATH": str(REPO)}

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "provisioner.cli", "--config", str(self.config), *args]

    def run(self, *args: str) -> float:
        started = time.monotonic()
        proc = subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"xeoncluster {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return time.monotonic() - started


def steps_in(log: Path) -> list[int]:
    return [int(s) for s in STEP.findall(log.read_text())] if log.exists() else []


def lose(cli: Cli, cluster: str, run: str, kind: str) -> None:
    if kind == "no-notice":
        ns = f"xc-{cluster}-node1"
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        subprocess.run(["kill", "-9", *pids], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    else:
        cli.run("exec", "--name", cluster, "--node", "node1", "--", f"touch ~/xeoncluster/runs/{run}/stop-request")


def measure(cli: Cli, cluster: str, kind: str, steps: int, save_steps: int) -> Recovery:
    run = f"rec-{kind}"
    log = cli.home / "clusters" / cluster / "runs" / run / "train.log"
    train = subprocess.Popen(cli.argv("train", "squad", "--name", cluster, "--demo", "--run", run, "--",
                                      "--max-steps", str(steps), "--save-steps", str(save_steps)),
                             env=cli.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while train.poll() is None and max(steps_in(log), default=0) < save_steps + save_steps // 2:
        time.sleep(0.2)
    lost_at, t_lost = max(steps_in(log), default=0), time.monotonic()
    lose(cli, cluster, run, kind)
    seen = len(steps_in(log))
    while train.poll() is None and not ("resuming from" in log.read_text() and len(steps_in(log)) > seen):
        time.sleep(0.2)
    recovered = time.monotonic() - t_lost
    if train.wait() != 0:
        raise SystemExit(f"the {kind} run failed; see {log}")
    metrics = json.loads((log.parent / "metrics.json").read_text())
    return Recovery(kind, lost_at, round(recovered, 1), int(metrics["lost_steps"]), metrics["restarts"][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--save-steps", type=int, default=40)
    args = parser.parse_args()
    cli = Cli(Path(tempfile.mkdtemp(prefix="xc-bench-recovery-")))
    cli.run("up", "--name", "benchwarm", "--nodes", "1")  # bakes the image once if needed
    cli.run("down", "--name", "benchwarm")
    warm_up = cli.run("up", "--name", "benchwarm", "--nodes", "1")
    cli.run("down", "--name", "benchwarm")
    cli.run("up", "--name", "benchrec", "--nodes", "2")
    try:
        results = [measure(cli, "benchrec", kind, args.steps, args.save_steps) for kind in ("no-notice", "notice")]
    finally:
        cli.run("down", "--name", "benchrec")
    print(json.dumps({"warm_one_node_up_seconds": round(warm_up, 1), "save_steps": args.save_steps,
                      "runs": [asdict(r) for r in results]}, indent=2))
    print(f"{'loss':10} {'recovery s':>10} {'vs warm up':>10} {'lost steps':>10}")
    for r in results:
        print(f"{r.kind:10} {r.recovery_seconds:>10.1f} {r.recovery_seconds / warm_up:>10.2f} {r.lost_steps:>10}")


if __name__ == "__main__":
    main()
