"""The agent's live view of a run, below the cluster: the pace from step events (median step, ETA,
projected cost, when a step is overdue), node use from two samples (a straggler marked), the probe
the nodes run, and the pattern that picks out a run's ranks for SIGUSR1 and nothing else."""
from __future__ import annotations

import json
import re
import subprocess
import sys

from xeoncluster.agent.pace import Pace
from xeoncluster.agent.stall import ere_literal, ranks_pattern
from xeoncluster.agent.usage_watch import Sample, mark_low, rates
from xeoncluster.cli.render_live import live_lines
from xeoncluster.runs.record import NodeUse, RunRecord, RunState


def test_the_pace_is_the_median_step_and_a_hang_is_ten_medians_and_the_minimum() -> None:
    pace = Pace()
    assert pace.stalled(100.0, 60) is None, "no step yet in this launch: model loading is no hang"
    for i, t in enumerate([0.0, 1.0, 2.0, 3.0, 13.0, 14.0]):  # one slow step among fast ones
        pace.step(t, (i + 1) * 2, loss=5.0 - i)
    assert pace.step_seconds() == 0.5 and pace.loss == 0.0
    assert pace.eta(12, 112) == 50.0
    live = pace.live(12, 112, cost_usd=1.0, usd_per_hour=3.6)
    assert live.projected_cost_usd == 1.05 and live.steps_per_second == 2.0
    assert pace.stalled(14.0 + 59, 60) is None and pace.stalled(14.0 + 61, 60) == 61
    assert pace.stalled(14.0 + 4, 1) is None and pace.stalled(14.0 + 6, 1) == 6, "10 medians (5s) rule too"
    pace.step(20.0, 4, None)  # an old step (a resumed launch's first report) moves nothing back
    assert pace.points[-1] == (14.0, 12)
    pace.step(70.0, 12, None)  # the same step again: the ranks evaluate, and say they are alive
    assert pace.points[-1] == (14.0, 12) and pace.stalled(125.0, 60) is None and pace.stalled(131.0, 60) == 61


def sample(t: float, cpu: float, rx: int = 0) -> Sample:
    return Sample(time=t, cpu_seconds=cpu, cpus=2, rss=2 * 2**30, mem_total=8 * 2**30, rx=rx, tx=0)


def test_node_use_is_a_rate_between_two_samples_and_a_straggler_is_marked() -> None:
    use = rates(sample(0, 10), sample(5, 18, rx=5000))
    assert (use.cpu_percent, use.mem_percent, use.rx_bytes_per_s) == (80.0, 25.0, 1000)
    uses = {"node0": NodeUse(cpu_percent=95), "node1": NodeUse(cpu_percent=90), "node2": NodeUse(cpu_percent=10)}
    assert [n for n, u in mark_low(uses).items() if u.low] == ["node2"]
    idle = {"node0": NodeUse(cpu_percent=3), "node1": NodeUse(cpu_percent=0)}
    assert not any(u.low for u in mark_low(idle).values()), "an idle cluster has no straggler"


def test_the_node_probe_prints_one_sample_from_this_namespace() -> None:
    out = subprocess.run([sys.executable, "-m", "xeoncluster.node.usage"], capture_output=True, text=True, check=True)
    probed = Sample.model_validate(json.loads(out.stdout))
    assert probed.cpus >= 1 and probed.rss > 0 and probed.mem_total > probed.rss


def test_the_ranks_pattern_matches_the_run_s_ranks_only() -> None:
    pattern = re.compile(ranks_pattern("/home/u/xeoncluster/runs/r.1"))
    assert pattern.search("/home/u/venv/bin/python -m xeoncluster.node squad --demo d --output-dir "
                          "/home/u/xeoncluster/runs/r.1 --lr 1")
    assert pattern.search("/home/u/venv/bin/python3 -m xeoncluster.node.user_script --output-dir "
                          "/home/u/xeoncluster/runs/r.1")
    for other in ("/home/u/venv/bin/mpiexec.hydra -n 2 /home/u/venv/bin/python -m xeoncluster.node squad "
                  "--output-dir /home/u/xeoncluster/runs/r.1",
                  "bash -c /home/u/venv/bin/python -m xeoncluster.node squad --output-dir /home/u/xeoncluster/runs/r.1",
                  "/home/u/venv/bin/python -m xeoncluster.node squad --output-dir /home/u/xeoncluster/runs/r.10",
                  "/home/u/venv/bin/python -m xeoncluster.node squad --output-dir /home/u/xeoncluster/runs/rx1"):
        assert not pattern.search(other), other
    assert ere_literal("a.b+(c)") == r"a\.b\+\(c\)"


def test_runs_shows_the_pace_and_the_nodes_of_an_active_run_only() -> None:
    record = RunRecord(run="r", cluster="c", task="squad", state=RunState.RUNNING, step=10, total_steps=100,
                       cost_usd=0.5, usage={"node0": NodeUse(cpu_percent=97, mem_percent=3.2),
                                            "node1": NodeUse(cpu_percent=5, low=True)})
    record.live.loss, record.live.steps_per_second, record.live.eta_seconds = 1.25, 2.0, 45.0
    record.live.projected_cost_usd = 0.75
    pace, nodes = live_lines(record)
    assert pace == ("run r: step 10/100, loss 1.2500, 2.00 steps/s, eta 0:00:45, $0.5000 so far, "
                    "$0.7500 projected at the end")
    assert nodes == "  nodes: node0 cpu 97% mem 3.2%; node1 cpu 5% mem 0.0% (LOW: far below the others)"
    assert live_lines(record.model_copy(update={"state": RunState.QUEUED})) == []
