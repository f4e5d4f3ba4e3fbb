"""A cluster's `max_cost` ceiling under moto: the watch agent prices the cluster's nodes from EC2 (each
since its LaunchTime), and at the ceiling its self-removal terminates every instance of the cluster, as
at a `max_hours` deadline. The clock is the test's: moto's spot price is $0.00001/hour."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

from aws_helpers import PUBLIC_KEY, cluster_config, live_state
from pytest import approx

from xeoncluster.agent.cluster_spend import cluster_spend
from xeoncluster.agent.self_removal import SelfRemoval
from xeoncluster.agent.watch import Watcher
from xeoncluster.cluster.autostop import SETTINGS, STATUS, AutoStop, WatchStatus
from xeoncluster.providers.base import LaunchRequest
from xeoncluster.runs.host import LocalHost


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_at_its_max_cost_the_cluster_terminates_its_instances(provider, ec2, tmp_path: Path) -> None:
    cluster = cluster_config(nodes=2, market="spot")
    provider.prepare(cluster, PUBLIC_KEY)
    provider.launch(LaunchRequest(cluster, 1, None, "master", 0))
    provider.launch(LaunchRequest(cluster, 1, None, "worker", 1))
    assert len(live_state(ec2, "t1")["instances"]) == 2
    clock, reports = Clock(), []
    folder = tmp_path / "t1"
    folder.mkdir()
    (folder / SETTINGS).write_text(AutoStop(idle_minutes=0, max_cost=0.0001, created_at=clock.now).model_dump_json())
    ctx = SimpleNamespace(provider=provider, config=cluster, state=SimpleNamespace(load=lambda: None))
    removal = SelfRemoval(ctx, LocalHost(str(tmp_path), sys.executable), reports.append)  # type: ignore[arg-type]
    busy = SimpleNamespace(busy=lambda: "an SSH session on node1")
    watch = Watcher(folder, busy, removal, reports.append, clock=clock,  # type: ignore[arg-type]
                    spend=cluster_spend(ctx))  # type: ignore[arg-type]
    clock.now += 4 * 3600  # 2 nodes x 4 h x $0.00001
    assert watch.check()
    assert WatchStatus.model_validate_json((folder / STATUS).read_text()).spent_usd == approx(0.00008, rel=0.01)
    assert len(live_state(ec2, "t1")["instances"]) == 2
    clock.now += 3600
    assert not watch.check()
    assert live_state(ec2, "t1")["instances"] == []
    assert reports[0] == "removing the cluster at its max_cost ceiling ($0.0001 spent of $0.0001)"
