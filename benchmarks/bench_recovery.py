"""How long a training run takes to come back after losing a node, against a warm one-node `up`
measured in the same run, and how many steps the loss cost, with and without a notice.

--on local (default): node1's namespace and processes vanish mid-run (no notice), or node1 gets a
stop request, which is what the watcher does on an interruption notice: checkpoint the current step,
then stop.
--on standin: the EC2 stand-in (started and stopped here; needs root). node1 gets a spot
interruption with 0 s of notice (the instance is reclaimed at once) or with --notice seconds; the
replacement launches from the cluster's AMI.

The recovery time runs from the loss to the first step the resumed run logs.

    python benchmarks/bench_recovery.py [--on local|standin] [--steps 400] [--save-steps 40]
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
STANDIN = REPO / "scripts" / "aws-standin.sh"
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
    """The CLI as a user runs it, on local nodes or, with `prefix`, inside the stand-in's namespace."""

    def __init__(self, work: Path, config: Path, prefix: list[str]) -> None:
        self.home, self.config, self.prefix = work / "home", config, prefix
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "XEONCLUSTER_HOME": str(self.home), "PYTHONPATH": str(REPO)}

    def argv(self, *args: str) -> list[str]:
        return [*self.prefix, sys.executable, "-m", "provisioner.cli", "--config", str(self.config), *args]

    def run(self, *args: str) -> float:
        started = time.monotonic()
        proc = subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, cwd=self.home)
        if proc.returncode != 0:
            raise SystemExit(f"xeoncluster {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return time.monotonic() - started

    def node_id(self, cluster: str, node: str) -> str:
        state = json.loads((self.home / "clusters" / cluster / "state.json").read_text())
        return str(next(n["id"] for n in state["nodes"] if n["name"] == node))


def standin(*args: str) -> str:
    return subprocess.run([str(STANDIN), *args], check=True, capture_output=True, text=True).stdout


def lose_local(cli: Cli, cluster: str, run: str, kind: str, notice: float) -> None:
    if kind == "no-notice":
        ns = f"xc-{cluster}-node1"
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        subprocess.run(["kill", "-9", *pids], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    else:
        cli.run("exec", "--name", cluster, "--node", "node1", "--", f"touch ~/xeoncluster/runs/{run}/stop-request")


def lose_on_standin(cli: Cli, cluster: str, run: str, kind: str, notice: float) -> None:
    standin("interrupt", cli.node_id(cluster, "node1"), "0" if kind == "no-notice" else str(notice))


def steps_in(log: Path) -> list[int]:
    return [int(s) for s in STEP.findall(log.read_text())] if log.exists() else []


def measure(cli: Cli, cluster: str, kind: str, args: argparse.Namespace) -> Recovery:
    run = f"rec-{kind}"
    log = cli.home / "clusters" / cluster / "runs" / run / "train.log"
    train = subprocess.Popen(cli.argv("train", "squad", "--name", cluster, "--demo", "--run", run, "--",
                                      "--max-steps", str(args.steps), "--save-steps", str(args.save_steps)),
                             env=cli.env, cwd=cli.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while train.poll() is None and max(steps_in(log), default=0) < args.save_steps + args.save_steps // 2:
        time.sleep(0.2)
    lost_at, t_lost = max(steps_in(log), default=0), time.monotonic()
    (lose_on_standin if args.on == "standin" else lose_local)(cli, cluster, run, kind, args.notice)
    seen = len(steps_in(log))
    while train.poll() is None and not ("resuming from" in log.read_text() and len(steps_in(log)) > seen):
        time.sleep(0.2)
    recovered = time.monotonic() - t_lost
    if train.wait() != 0:
        raise SystemExit(f"the {kind} run failed; see {log}")
    metrics = json.loads((log.parent / "metrics.json").read_text())
    return Recovery(kind, lost_at, round(recovered, 1), int(metrics["lost_steps"]), metrics["restarts"][0])


def recoveries(cli: Cli, args: argparse.Namespace) -> tuple[float, list[Recovery]]:
    cli.run("up", "--name", "benchwarm", "--nodes", "1")  # bakes the image once if needed
    cli.run("down", "--name", "benchwarm")
    warm_up = cli.run("up", "--name", "benchwarm", "--nodes", "1")
    cli.run("down", "--name", "benchwarm")
    cli.run("up", "--name", "benchrec", "--nodes", "2")
    try:
        return warm_up, [measure(cli, "benchrec", kind, args) for kind in ("no-notice", "notice")]
    finally:
        cli.run("down", "--name", "benchrec", *(["--purge-images"] if args.on == "standin" else []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--on", choices=("local", "standin"), default="local")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--save-steps", type=int, default=40)
    parser.add_argument("--notice", type=float, default=30.0, help="stand-in: seconds of notice before reclaim")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="xc-bench-recovery-"))
    if args.on == "local":
        config = work / "cluster.yaml"
        config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {work / 'root'}\n")
        warm_up, results = recoveries(Cli(work, config, []), args)
    else:
        standin("stop")
        standin("start")
        try:
            cli = Cli(work, Path(standin("config").strip()), [str(STANDIN), "run", "--"])
            warm_up, results = recoveries(cli, args)
        finally:
            standin("stop")
    print(json.dumps({"on": args.on, "warm_one_node_up_seconds": round(warm_up, 1), "save_steps": args.save_steps,
                      "runs": [asdict(r) for r in results]}, indent=2))
    print(f"{'loss':10} {'recovery s':>10} {'vs warm up':>10} {'lost steps':>10}")
    for r in results:
        print(f"{r.kind:10} {r.recovery_seconds:>10.1f} {r.recovery_seconds / warm_up:>10.2f} {r.lost_steps:>10}")


if __name__ == "__main__":
    main()
