"""The pause a lost node costs a run (from the last step before the stop or loss to the first step
after it), against a warm one-node `up` measured in the same run, and the steps lost, for each of
--notices (default 120 s, 30 s, and none). The run is detached: no CLI is alive while its agent
recovers it.

The worker is lost each time (node1 first, then the node that replaced it). Then, on the stand-in, the
master is lost for each of --masters (default 120 s of notice, and none): with a notice its agent hands
the run to a successor it readied (agent/handover.py); with none a worker takes over after the heartbeats
stop (agent/takeover.py: 150 s of silence with the default orphan_minutes).

--on local (default): the worker announces its end (a notice file in its home, with a deadline that many
seconds away), or, with no notice, its namespace and processes vanish mid-run.
--on standin: the EC2 stand-in (started and stopped here; needs root), unscaled latency model (a boot
takes 20 s): the worker gets a spot interruption with that many seconds of notice; 0 is reclaimed at once.

Then (--shrink, both) a worker is lost without notice while the cluster has no capacity (the local
provider's `no-capacity` file; the stand-in's `capacity` fault on the cluster's instance type): the run
trains on the node left (issue 37), and grows back once capacity returns; both pauses are rows.

Each pause is broken down from the run's own events (events.jsonl on the agent's host) and its
restart record: `ended` (the last step to the end of the job: the stop and its checkpoint, or, with no
notice, noticing the loss), `recover` (the agent's replacement and checkpoint restore), `relaunch` (to
rank 0's `started`: mpirun, python, torch, the model and the rendezvous) and `first step`. A DDP step needs
every rank, so steps after a loss without notice show the lost node still ran (a clean shutdown, the
stand-in's as EC2's, keeps its rank stepping for seconds): such a pause starts at the ranks' last step,
and how long they stepped on after the loss was asked for is reported apart (`stepped on`). The relaunch
is broken down further: `prepare` (the agent's topology probe and package sync, from the restart
record), `launch` (mpirun and SSH up to rank 0's process start) and the parts rank 0's `started` event
reports (xeoncluster/node/diagnostics/startup_clock.py, PARTS). A job started ahead of a swap (a notice
long enough for a replacement: agent/prestart.py) has `release` (the agent's release on every node, or
up to rank 0 leaving its hold if its node's release came first), `unheld` (from the release to the ranks
leaving their hold), the parts after the hold, and, apart and not
in the pause, `started ahead` (its start while the old job still trained).

    python benchmarks/bench_recovery.py [--on local|standin] [--steps N] [--save-steps 40] [--notices 120,30,0]
                                        [--masters 120,0] [--no-shrink] [--repeat 2]
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SUBNET = "10.216.0.0/24"
sys.path.insert(0, str(REPO))
from standin_account import create_boundary  # noqa: E402 - beside this script

from xeoncluster.node.diagnostics.startup_clock import read_parts  # noqa: E402 - this checkout's
from xeoncluster.node.events.events import RunEvent, read_events  # noqa: E402 - this checkout's, whether installed or not


@dataclass
class Recovery:
    notice_seconds: float  # 0: none
    node: str  # "worker" or "master"
    lost_at_step: int
    pause_seconds: float
    lost_steps: int
    parts: dict[str, float]  # ended, recover, relaunch, first step: they add up to the pause
    relaunch_parts: dict[str, float]  # prepare, launch, then rank 0's startup parts: they add up to the relaunch
    restart: dict[str, object]
    label: str = ""  # what the row is, when not a loss with or without notice
    trial: int = 1  # every row is measured once per trial (--repeat), all on one cluster
    stepped_on: float = 0.0  # no notice: seconds the ranks still stepped after the loss was asked for

    @property
    def kind(self) -> str:
        if self.label:
            return self.label
        return f"{self.node}, " + (f"{self.notice_seconds:g} s notice" if self.notice_seconds else "no notice")


class Cli:
    """The CLI as a user runs it, on local nodes or, with `prefix`, inside the stand-in's namespace."""

    def __init__(self, work: Path, config: Path, prefix: list[str]) -> None:
        self.home, self.config, self.prefix = work / "home", config, prefix
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "XEONCLUSTER_HOME": str(self.home), "PYTHONPATH": str(REPO)}

    def argv(self, *args: str) -> list[str]:
        return [*self.prefix, sys.executable, "-m", "xeoncluster.cli", "--config", str(self.config), *args]

    def out(self, *args: str) -> str:
        proc = subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, cwd=self.home)
        if proc.returncode != 0:
            raise SystemExit(f"xeoncluster {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return proc.stdout

    def run(self, *args: str) -> float:
        started = time.monotonic()
        self.out(*args)
        return time.monotonic() - started

    def record(self, cluster: str, run: str) -> dict[str, Any]:
        """The run's record; while a lost master is being replaced nobody answers, and this waits."""
        while True:
            proc = subprocess.run(self.argv("runs", "--name", cluster, "--json"), env=self.env, capture_output=True,
                                  text=True, cwd=self.home)
            found = [r for r in json.loads(proc.stdout or "[]") if r["run"] == run] if proc.returncode == 0 else []
            if found:
                return dict(found[0])
            time.sleep(3)

    def node(self, cluster: str, role: str) -> tuple[str, str]:
        """A node's name and id, as this machine's state knows them now (the CLI refreshes it)."""
        self.out("status", "--name", cluster)
        state = json.loads((self.home / "clusters" / cluster / "state.json").read_text())
        node = next(n for n in state["nodes"] if n["role"] == role)
        return str(node["name"]), str(node["id"])

    def on_worker(self, cluster: str, path: str) -> bool:
        name, _ = self.node(cluster, "worker")
        return subprocess.run(self.argv("exec", "--name", cluster, "--node", name, "--", f"test -f {path}"),
                              env=self.env, capture_output=True, cwd=self.home).returncode == 0


def standin(*args: str) -> str:
    return subprocess.run([sys.executable, "-P", "-m", "xeoncluster.standin", *args], check=True, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}).stdout


def lose(cli: Cli, on: str, cluster: str, notice: float, role: str = "worker") -> None:
    name, instance = cli.node(cluster, role)
    if on == "standin":
        standin("interrupt", instance, f"{notice:g}")
    elif not notice:
        ns = f"xc-{cluster}-{name}"
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        subprocess.run(["kill", "-9", *pids], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    else:  # a local node announces its end in its own home (xeoncluster/node/checkpoints/notices.py, node-file)
        text = json.dumps({"reason": "benchmark notice", "deadline": time.time() + notice})
        cli.run("exec", "--name", cluster, "--node", name, "--", f"echo '{text}' > ~/xeoncluster/notice")


def agent_file(cli: Cli, on: str, cluster: str, run: str, name: str) -> str:
    """One file of the run's folder where its agent keeps it: here for local nodes, else on the master."""
    if on == "local":
        return (cli.home / "clusters" / cluster / "runs" / run / name).read_text()
    # `exec` relays output in chunks, each labelled as a line: a long event (a `started` with its parts)
    # cut in two was lost. Short base64 lines come through whole.
    text = cli.out("exec", "--name", cluster, "--node", "node0", "--",
                   f"base64 -w 76 ~/xeoncluster/agent/clusters/{cluster}/runs/{run}/{name}")
    payload = "".join(line.split("| ", 1)[1].strip() for line in text.splitlines() if "| " in line)
    return base64.b64decode(payload).decode()


def events(cli: Cli, on: str, cluster: str, run: str) -> list[RunEvent]:
    return read_events(agent_file(cli, on, cluster, run, "events.jsonl"))


def capacity(cli: Cli, on: str, cluster: str, root: Path, available: bool) -> None:
    """The provider's no-capacity fault: the local provider's file, or the stand-in's fault on the
    cluster's instance type (every zone)."""
    if on == "local":
        fault = root / "clusters" / cluster / "no-capacity"
        fault.unlink(missing_ok=True) if available else fault.touch()
        return
    state = json.loads((cli.home / "clusters" / cluster / "state.json").read_text())
    types = sorted({n["instance_type"] for n in state["nodes"] if n.get("instance_type")})
    standin("faults", "capacity=" + ("[]" if available else json.dumps([{"instance_type": t} for t in types])))


def last_step(found: list[RunEvent], restart: dict[str, Any]) -> float:
    """When the ranks took their last step before the restart or growth `restart` began."""
    began = float(restart["began_at"])
    return [e for e in found if e.kind == "step" and e.time <= began][-1].time


def pause_parts(found: list[RunEvent], restart: dict[str, Any]) -> dict[str, float]:
    """From the ranks' last step before the stop to the first step after, in the parts the events and the
    restart record mark; without a notice too, as a DDP step needs every rank: one after the loss shows the
    lost node still ran (the stand-in's clean shutdown, as EC2's, keeps its rank stepping for seconds). A
    resumed attempt whose `started` did not reach the events (seen once on the stand-in) gets its relaunch up
    to its first step, and no first-step part."""
    began, took = float(restart["began_at"]), float(restart["seconds"])
    resumed = began + took
    first = next(e for e in found if e.kind == "step" and e.time > resumed)
    started = next((e for e in found if e.kind == "started" and resumed <= e.time <= first.time), None)
    relaunched = started.time if started else first.time
    return {"ended": began - last_step(found, restart), "recover": took, "relaunch": relaunched - resumed,
            "first step": first.time - relaunched}


def stepped_on(found: list[RunEvent], lost_at: float | None, restart: dict[str, Any]) -> float:
    """How long the ranks still stepped after a loss without notice was asked for at `lost_at` (None: a notice
    or a growth), the lost node among them: not in the pause, which starts at their last step."""
    return 0.0 if lost_at is None else round(max(0.0, last_step(found, restart) - lost_at), 1)


def relaunch_parts(found: list[RunEvent], restart: dict[str, Any], relaunch: float) -> dict[str, float]:
    """The relaunch in the parts the restart record and the resumed `started` event's metrics mark."""
    resumed = float(restart["began_at"]) + float(restart["seconds"])
    started = next((e for e in found if e.kind == "started" and e.time >= resumed), None)
    startup = read_parts(started.metrics) if started else {}
    prepare = float(restart.get("prepare_seconds", 0.0))
    if not startup:
        return {"prepare": prepare}
    if "held" in startup:  # started ahead of the swap (agent/prestart.py): only what followed its release counts
        names = list(startup)
        after = {name: startup[name] for name in names[names.index("held") + 1:]}
        # Rank 0 leaves its hold once its own node is released, which can come before the agent is done
        # releasing the others: then the release counts only to that moment, and nothing is unheld.
        release = min(prepare, max(0.0, relaunch - sum(after.values())))
        return {"release": release, "unheld": relaunch - release - sum(after.values()), **after,
                "started ahead": sum(startup[name] for name in names[:names.index("held")])}
    return {"prepare": prepare, "launch": relaunch - prepare - sum(startup.values()), **startup}


def measure(cli: Cli, cluster: str, notice: float, args: argparse.Namespace, role: str = "worker",
            trial: int = 1) -> list[Recovery]:
    run = (f"rec-{role}-{notice:g}s" if notice else f"rec-{role}-none") + f"-{trial}"
    cli.out("train", "squad", "--name", cluster, "--demo", "--run", run, "--detach", "--",
            "--max-steps", str(args.steps), "--save-steps", str(args.save_steps))
    while int(cli.record(cluster, run)["step"]) < args.save_steps + args.save_steps // 2:
        time.sleep(1)
    if role == "master":  # what a worker takes over from: the run's files there (agent/replica.py)
        while not cli.on_worker(cluster, f"~/xeoncluster/agent/clusters/{cluster}/runs/{run}/run.json"):
            time.sleep(2)
    lost_at_step, lost_at = int(cli.record(cluster, run)["step"]), time.time()
    lose(cli, args.on, cluster, notice, role)
    while (record := cli.record(cluster, run))["state"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(2)
    if record["state"] != "succeeded":
        raise SystemExit(f"run {run} ended {record['state']}: {record['error']}")
    (cli.home / f"{run}.train.log").write_text(cli.out("logs", run, "--name", cluster))  # fetches metrics.json
    metrics = json.loads((cli.home / "results" / cluster / run / "metrics.json").read_text())
    restart = metrics["restarts"][0]
    found_events = events(cli, args.on, cluster, run)
    kept = cli.home / f"{run}.events.jsonl"  # the raw timeline, to look into a pause again
    kept.write_text("".join(e.to_json() + "\n" for e in found_events))
    print(f"events of {run} (loss at {lost_at:.1f}): {kept}", file=sys.stderr, flush=True)
    exact = pause_parts(found_events, restart)
    parts = {k: round(v, 1) for k, v in exact.items()}
    relaunch = {k: round(v, 2) for k, v in relaunch_parts(found_events, restart, exact["relaunch"]).items()}
    found = Recovery(notice, role, lost_at_step, round(sum(parts.values()), 1), int(metrics["lost_steps"]), parts,
                     relaunch, restart, trial=trial,
                     stepped_on=stepped_on(found_events, None if notice else lost_at, restart))
    print(f"measured: {json.dumps(asdict(found))}", file=sys.stderr, flush=True)  # kept if a later one fails
    if not restart.get("replacing"):
        return [found]
    # It trained on with the node left while the replacement booted (--train-while-replacing): the growth
    # that followed paused the run too.
    stored = json.loads(agent_file(cli, args.on, cluster, run, "run.json"))
    return [found, *change_rows(found_events, [("then grow-back", stored["growths"][0], 0.0)], lost_at_step,
                                trial, notice)]


def change_rows(found_events: list[RunEvent], changes: list[tuple[str, dict[str, Any], float]], lost_at_step: int,
                trial: int, notice: float = 0.0) -> list[Recovery]:
    """One row per change of the run's nodes: its label, its restart or growth record, and when its loss came
    (0: a growth, which pauses from the ranks' stop)."""
    rows = []
    for label, change, at in changes:
        exact = pause_parts(found_events, change)
        parts = {k: round(v, 1) for k, v in exact.items()}
        relaunch = {k: round(v, 2) for k, v in relaunch_parts(found_events, change, exact["relaunch"]).items()}
        rows.append(Recovery(notice, "worker", lost_at_step, round(sum(parts.values()), 1),
                             int(change.get("lost_steps", 0)), parts, relaunch, change, label, trial,
                             stepped_on(found_events, at or None, change)))
        print(f"measured: {json.dumps(asdict(rows[-1]))}", file=sys.stderr, flush=True)
    return rows


def measure_shrink(cli: Cli, cluster: str, args: argparse.Namespace, root: Path, trial: int = 1) -> list[Recovery]:
    """A worker lost with no capacity (the provider's fault): the pause until the run trains on the
    node left, then, once capacity is back, the pause of the grow-back (agent/regrowth.py)."""
    run = f"rec-worker-nocap-{trial}"
    steps = max(args.steps, 1200)  # outlasts the regrowth's first ask (20 s) and the new node's readying
    cli.out("train", "squad", "--name", cluster, "--demo", "--run", run, "--detach", "--",
            "--max-steps", str(steps), "--save-steps", str(args.save_steps))
    while int(cli.record(cluster, run)["step"]) < args.save_steps + args.save_steps // 2:
        time.sleep(1)
    capacity(cli, args.on, cluster, root, available=False)
    try:
        lost_at_step, lost_at = int(cli.record(cluster, run)["step"]), time.time()
        lose(cli, args.on, cluster, 0)
        while not (record := cli.record(cluster, run))["restarts"] or int(record["step"]) <= lost_at_step:
            time.sleep(1)
    finally:
        capacity(cli, args.on, cluster, root, available=True)
    while (record := cli.record(cluster, run))["state"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(2)
    if record["state"] != "succeeded":
        raise SystemExit(f"run {run} ended {record['state']}: {record['error']}")
    stored = json.loads(agent_file(cli, args.on, cluster, run, "run.json"))
    found_events = events(cli, args.on, cluster, run)
    (cli.home / f"{run}.events.jsonl").write_text("".join(e.to_json() + "\n" for e in found_events))
    return change_rows(found_events, [("worker, no capacity", stored["restarts"][0], lost_at),
                                      ("grow-back", stored["growths"][0], 0.0)], lost_at_step, trial)


def recoveries(cli: Cli, args: argparse.Namespace) -> tuple[float, list[Recovery]]:
    cli.run("up", "--name", "benchwarm", "--nodes", "1")  # bakes the image once if needed
    cli.run("down", "--name", "benchwarm")
    warm_up = cli.run("up", "--name", "benchwarm", "--nodes", "1")
    print(f"measured: warm one-node up {warm_up:.1f}s", file=sys.stderr, flush=True)
    cli.run("down", "--name", "benchwarm")
    cli.run("up", "--name", "benchrec", "--nodes", "2")
    try:
        return warm_up, [row for trial in range(1, args.repeat + 1) for row in every_row(cli, args, trial)]
    finally:
        cli.run("down", "--name", "benchrec", "--force", *(["--purge-images"] if args.on == "standin" else []))


def every_row(cli: Cli, args: argparse.Namespace, trial: int) -> list[Recovery]:
    found = [row for notice in args.notices for row in measure(cli, "benchrec", notice, args, trial=trial)]
    if args.shrink:
        found += measure_shrink(cli, "benchrec", args, cli.home.parent / "root", trial)
    masters = args.masters if args.on == "standin" else []  # a local cluster's agent runs on this machine
    return found + [row for notice in masters for row in measure(cli, "benchrec", notice, args, "master", trial)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--on", choices=("local", "standin"), default="local")
    parser.add_argument("--steps", type=int, help="default 400 (local), 1500 (stand-in: outlasts the notice)")
    parser.add_argument("--save-steps", type=int, default=40)
    parser.add_argument("--notices", default="120,30,0", help="seconds of notice before each loss; 0: none")
    parser.add_argument("--masters", default="120,0", help="the same for the master (stand-in only); '' for none")
    parser.add_argument("--shrink", action=argparse.BooleanOptionalAction, default=True,
                        help="a worker lost with no capacity: the pause until the run trains on fewer "
                             "nodes, and the grow-back's once capacity returns")
    parser.add_argument("--repeat", type=int, default=2, help="measure every row this many times, in turn")
    args = parser.parse_args()
    # A kill or a timeout's SIGTERM ends the run as Ctrl-C does, through the blocks that take its clusters and
    # the stand-in down; by default it would leave containers running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.notices = [float(n) for n in args.notices.split(",") if n]
    args.masters = [float(n) for n in args.masters.split(",") if n]
    args.steps = args.steps or (1500 if args.on == "standin" else 400)
    work = Path(tempfile.mkdtemp(prefix="xc-bench-recovery-"))
    if args.on == "local":
        config = work / "cluster.yaml"
        config.write_text(f"provider: local\nlocal:\n  subnet: {SUBNET}\n  root: {work / 'root'}\n")
        warm_up, results = recoveries(Cli(work, config, []), args)
    else:
        standin("stop")
        standin("start")
        try:
            create_boundary(work)
            prefix = [sys.executable, "-P", "-m", "xeoncluster.standin", "run", "--"]
            # bake-first: the first up leaves a finished image, so the next one is warm (with the default,
            # parallel, the image may still be baking and that up would start from the base).
            config = work / "cluster.yaml"
            config.write_text(Path(standin("config").strip()).read_text() + "image_strategy: bake-first\n")
            warm_up, results = recoveries(Cli(work, config, prefix), args)
        finally:
            standin("stop")
    print(json.dumps({"on": args.on, "cpu": cpu_model(), "warm_one_node_up_seconds": round(warm_up, 1),
                      "save_steps": args.save_steps, "runs": [asdict(r) for r in results]}, indent=2))
    print(f"{'loss':22} {'trial':>5} {'pause s':>8} {'vs warm up':>10} {'lost steps':>10}  "
          "ended / recover / relaunch / first step  (stepped on after the loss)")
    for r in results:
        parts = " / ".join(f"{v:.1f}" for v in r.parts.values())
        after = f"  ({r.stepped_on:.1f} s)" if r.stepped_on else ""
        print(f"{r.kind:22} {r.trial:>5} {r.pause_seconds:>8.1f} {r.pause_seconds / warm_up:>10.2f} "
              f"{r.lost_steps:>10}  {parts}{after}")
    for r in results:
        print(f"{r.kind} ({r.trial}) relaunch: " + ", ".join(f"{k} {v:.2f}" for k, v in r.relaunch_parts.items()))


def cpu_model() -> str:
    return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), "unknown")


if __name__ == "__main__":
    main()
