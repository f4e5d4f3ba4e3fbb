"""A rank's start, cold against forked from the node's warm server (xeoncluster/node/warm_start).

One job of 2 ranks on this machine (`mpiexec -n 2`, as in tests/training), `python -m xeoncluster.node squad`
for --steps steps, launched alternately cold (XC_WARM_START=0) and warm, --repeat times each, after one
launch that starts the servers (not counted). Per launch:

- job: the whole job's wall seconds, mpiexec to its exit;
- ready: rank 0's startup parts up to its first step (its `started` event: python, libraries, data,
  process group, model, ...), of which python + libraries is what a warm start saves;
- CPU: CPU-seconds of every process of the job: mpiexec and the processes it started (this process's
  children), and the forked ranks (the servers' reaped children).

A relaunch after a lost node starts every rank again: the saving is per rank, per relaunch.

    python benchmarks/bench_warm_start.py [--steps 3] [--repeat 3] [--model demo|minilm]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_measures import cpu_model

from xeoncluster.node.diagnostics.startup_clock import read_parts
from xeoncluster.node.events.events import EVENT_KEY_ENV, parse_line
from xeoncluster.node.warm_start.server import running

EVENT_KEY = "ab" * 32  # what the agent hands a launch: the ranks sign their events with it

REPO = Path(__file__).resolve().parents[1]
TAG = "WARM_BENCH_TAG"


@dataclass(frozen=True)
class Launch:
    mode: str
    job_s: float
    ready_s: float
    saved_parts_s: float  # python + libraries
    cpu_s: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def servers(tag: str) -> list[int]:
    return [server.pid for server in running() if tag.encode() in server.environ]


def reaped_cpu(pids: list[int]) -> float:
    """CPU-seconds of the children these processes have reaped (cutime + cstime)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[13]) + int(fields[14])
    return total / os.sysconf("SC_CLK_TCK")


def own_children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command(model: Path, train: Path, out: Path, steps: int) -> list[str]:
    mpiexec = Path(sys.executable).parent / "mpiexec.hydra"
    return [str(mpiexec), "-n", "2", sys.executable, "-m", "xeoncluster.node", "squad", "--model", str(model),
            "--train-file", str(train), "--output-dir", str(out), "--cache-dir", str(out.parent / "cache"),
            "--max-train-samples", "64", "--max-seq-length", "64", "--doc-stride", "24", "--batch-size", "4",
            "--max-steps", str(steps), "--save-steps", "1000", "--seed", "0", "--precision", "fp32",
            "--no-eval-before"]


def launch(mode: str, argv: list[str], env: dict[str, str], tag: str) -> Launch:
    env = {**env, "MASTER_PORT": str(free_port()), "XC_WARM_START": "0" if mode == "cold" else "1"}
    before = own_children_cpu() + reaped_cpu(servers(tag))
    began = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    job = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"{mode} launch failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    parts = started_parts(done.stdout)
    cpu = own_children_cpu() + reaped_cpu(servers(tag)) - before
    return Launch(mode, round(job, 2), round(sum(parts.values()), 2),
                  round(parts.get("python", 0.0) + parts.get("libraries", 0.0), 2), round(cpu, 2))


def started_parts(out: str) -> dict[str, float]:
    for line in out.splitlines():
        event = parse_line(line, EVENT_KEY)
        if event is not None and event.kind == "started" and event.rank == 0:
            return read_parts(event.metrics)
    raise SystemExit(f"no started event:\n{out[-3000:]}")


def model_and_data(kind: str, work: Path) -> tuple[Path, Path]:
    from xeoncluster.node.tasks.demo_assets import ensure_demo_assets

    demo = work / "demo"
    ensure_demo_assets(demo, seed=0)
    if kind == "demo":
        return demo / "model", demo / "squad" / "train.json"
    from bench_train import minilm_model

    return minilm_model(work), demo / "squad" / "train.json"


def median(launches: list[Launch], mode: str, field: str) -> float:
    return round(statistics.median(getattr(x, field) for x in launches if x.mode == mode), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--model", choices=("demo", "minilm"), default="demo")
    args = parser.parse_args()
    tag = f"{TAG}={uuid.uuid4().hex}"
    env = {**os.environ, EVENT_KEY_ENV: EVENT_KEY, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "PYTHONPATH": str(REPO), TAG: tag.split("=", 1)[1]}
    launches: list[Launch] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model, train = model_and_data(args.model, work)
        try:
            launch("warm", command(model, train, work / "first", args.steps), env, tag)  # starts the servers
            for i in range(args.repeat):
                for mode in ("cold", "warm"):
                    launches.append(launch(mode, command(model, train, work / f"{mode}{i}", args.steps), env, tag))
        finally:
            for pid in servers(tag):
                os.kill(pid, signal.SIGKILL)
    report(args, launches)


def report(args: argparse.Namespace, launches: list[Launch]) -> None:
    fields = ("job_s", "ready_s", "saved_parts_s", "cpu_s")
    summary = {f: {"cold": median(launches, "cold", f), "warm": median(launches, "warm", f)} for f in fields}
    ratios = {f: round(summary[f]["warm"] / summary[f]["cold"], 2) for f in fields if summary[f]["cold"]}
    print(json.dumps({"cpu": cpu_model(), "model": args.model, "steps": args.steps, "repeat": args.repeat,
                      "launches": [asdict(x) for x in launches], "median": summary, "warm_over_cold": ratios},
                     indent=1))
    print(f"\n{'median of ' + str(args.repeat):<28}{'cold':>8}{'warm':>8}{'warm/cold':>11}")
    names = {"job_s": "whole job, s", "ready_s": "start to first step, s", "saved_parts_s": "python+libraries, s",
             "cpu_s": "CPU, s (2 ranks)"}
    for f in fields:
        print(f"{names[f]:<28}{summary[f]['cold']:>8}{summary[f]['warm']:>8}{ratios.get(f, 0):>11}")


if __name__ == "__main__":
    main()
