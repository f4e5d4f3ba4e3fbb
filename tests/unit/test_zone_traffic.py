"""The estimate of what a run's gradients cost when its nodes sit in more than one zone (a replacement
that crossed zones, where aws.replace_across_zones allows it): ring all-reduce sends about
2(N-1)/N x the fp32 gradient bytes over each link of the ring, and each link that joins two zones is billed."""
from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from xeoncluster.agent.pace import Pace
from xeoncluster.agent.run_watches import RunWatches
from xeoncluster.cli import render_runs
from xeoncluster.providers.base import Node
from xeoncluster.runs.record import RunRecord, RunState
from xeoncluster.runs.zone_traffic import ZoneSpread, crossing_links, zone_traffic

BERT_BASE = 110_000_000  # 440 MB of fp32 gradients


def test_the_links_of_the_ring_that_join_two_zones() -> None:
    assert crossing_links(["a", "a", "a"]) == 0
    assert crossing_links(["a", "b", "a"]) == 2  # into node1's zone and back out
    assert crossing_links(["a", "a", "b", "b"]) == 2
    assert crossing_links(["a", "b", "a", "b"]) == 4
    assert crossing_links(["a"]) == 0 and crossing_links([]) == 0


def test_one_zone_or_an_unknown_zone_has_no_estimate() -> None:
    assert zone_traffic(BERT_BASE, ["a", "a", "a"], 0.02, 1.0) is None
    assert zone_traffic(BERT_BASE, ["a", None, "b"], 0.02, 1.0) is None


def test_a_bert_base_on_three_nodes_with_one_across_zones() -> None:
    per_rank = 2 * 2 / 3 * 0.44  # GB per rank per step: the "about 0.6 GB"
    traffic = zone_traffic(BERT_BASE, ["us-east-1a", "us-east-1b", "us-east-1a"], 0.02, steps_per_second=0.5)
    assert traffic is not None and traffic.zones == 2
    assert traffic.gb_per_step == pytest.approx(2 * per_rank)
    assert traffic.gb_per_hour == pytest.approx(2 * per_rank * 0.5 * 3600)  # about 2112 GB/h
    assert traffic.usd_per_hour == pytest.approx(2 * per_rank * 0.5 * 3600 * 0.02)  # about $42/h
    assert traffic.describe() == ("nodes in 2 zones: DDP sends about 1.173 GB across zones per step "
                                  "(about 2112.0 GB/h, $42.24/h at $0.02/GB)")


def test_before_the_pace_is_known_only_the_step_is_estimated() -> None:
    traffic = zone_traffic(BERT_BASE, ["a", "b"], 0.02)
    assert traffic is not None and traffic.gb_per_hour is None and traffic.usd_per_hour is None
    assert traffic.gb_per_step == pytest.approx(0.44 * 2)  # 2(N-1)/N = 1 on each of the two links
    assert "the hourly figure follows the run's pace" in traffic.describe()


def test_the_pace_carries_the_estimate_at_the_measured_steps_per_second() -> None:
    pace = Pace(spread=ZoneSpread(BERT_BASE, ("a", "b", "a"), 0.02))
    for i in range(3):
        pace.step(float(i * 2), i + 1, loss=1.0)
    live = pace.live(3, 10, cost_usd=0.0, usd_per_hour=0.0)
    assert live.steps_per_second == 0.5 and live.zone_traffic is not None
    assert live.zone_traffic.gb_per_hour == pytest.approx(live.zone_traffic.gb_per_step * 0.5 * 3600)
    assert Pace(spread=ZoneSpread(BERT_BASE, ("a", "a"), 0.02)).live(0, None, 0.0, 0.0).zone_traffic is None


def agent_watching(zones: list[str], notes: list[str]) -> RunWatches:
    nodes = tuple(Node(f"node{i}", f"i-{i}", f"10.0.0.{i + 2}", f"10.0.0.{i + 2}", "worker" if i else "master",
                       "spot", zone=zone) for i, zone in enumerate(zones))
    provider = SimpleNamespace(inter_zone_usd_per_gb=lambda: 0.02)
    run: Any = SimpleNamespace(plan=SimpleNamespace(nodes=nodes), pace=Pace(), note=notes.append,
                               ctx=SimpleNamespace(provider=provider))
    return RunWatches(run)


def test_the_runs_log_says_what_crossing_zones_costs() -> None:
    notes: list[str] = []
    watches = agent_watching(["us-east-1a", "us-east-1a", "us-east-1b"], notes)
    watches._zones(float(BERT_BASE))
    assert notes == ["nodes in 2 zones: DDP sends about 1.173 GB across zones per step ($0.02/GB; the hourly "
                     "figure follows the run's pace); 110,000,000 parameters, gradients in fp32"]
    quiet: list[str] = []
    agent_watching(["us-east-1a", "us-east-1a"], quiet)._zones(float(BERT_BASE))
    assert quiet == []


def test_once_the_pace_is_known_the_log_says_the_traffic_per_hour_once_a_launch() -> None:
    notes: list[str] = []
    watches = agent_watching(["us-east-1a", "us-east-1b"], notes)
    watches._zones(float(BERT_BASE))
    before = Pace(spread=watches.run.pace.spread).live(0, None, 0.0, 0.0)
    watches._hourly_traffic(before)
    assert len(notes) == 1  # no pace yet: the launch's note has said all there is
    for step in (1, 2, 3):
        watches.run.pace.step(100.0 + 2 * step, step, None)
    for _ in range(2):
        watches._hourly_traffic(watches.run.pace.live(3, None, 0.0, 0.0))
    assert notes[1:] == ["at the run's pace, nodes in 2 zones: DDP sends about 0.880 GB across zones per step "
                         "(about 1584.0 GB/h, $31.68/h at $0.02/GB)"]


def test_runs_shows_the_estimate_of_a_run_whose_nodes_crossed_zones(capsys: pytest.CaptureFixture[str]) -> None:
    record = RunRecord(run="r1", cluster="c1", task="squad", state=RunState.SUCCEEDED, step=10)
    record.live.zone_traffic = zone_traffic(BERT_BASE, ["a", "b", "a"], 0.02, 0.5)
    render_runs.runs_table([record], "c1", [], {})
    out = " ".join(capsys.readouterr().out.split())
    assert ("run r1: nodes in 2 zones: DDP sends about 1.173 GB across zones per step "
            "(about 2112.0 GB/h, $42.24/h") in out


def test_the_estimate_crosses_the_wire_in_the_record() -> None:
    record = RunRecord(run="r1", cluster="c1", task="squad")
    record.live.zone_traffic = zone_traffic(BERT_BASE, ["a", "b"], 0.02, 1.0)
    read = RunRecord.model_validate_json(record.model_dump_json())
    assert read.live.zone_traffic == record.live.zone_traffic
    raw = json.loads(record.model_dump_json())
    raw["live"]["zone_traffic"]["usd_per_hour"] = float("inf")
    with pytest.raises(ValueError):
        RunRecord.model_validate_json(json.dumps(raw).replace("Infinity", "1e999"))
