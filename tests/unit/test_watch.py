"""The watch agent's decisions, on a clock the test moves: idle minutes count from the last activity
(an active run, a CLI command holding the cluster, an SSH session), a deadline comes whatever runs,
settings are re-read at every check, a failed check or removal never removes, one agent per cluster."""
from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from xeoncluster.agent import heartbeat
from xeoncluster.agent.watch import Watcher
from xeoncluster.cluster.autostop import SETTINGS, STATUS, AutoStop, WatchStatus
from xeoncluster.core.errors import BusyError
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.node_kinds import Node, Role
from xeoncluster.remote.shell import CommandResult


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Busy:
    """What the cluster is doing at each check: "" is idle; an exception is a check that failed."""

    def __init__(self) -> None:
        self.answer: str | Exception = ""

    def busy(self) -> str:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Removals:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail: Exception | None = None

    def remove(self, by: str, detail: str) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append((by, detail))


def watcher(tmp_path: Path, clock: Clock, idle: float = 1, max_hours: float | None = None,
            created_at: float | None = None) -> tuple[Watcher, Busy, Removals, list[str]]:
    settings = AutoStop(idle_minutes=idle, max_hours=max_hours, created_at=created_at or clock.now)
    (tmp_path / SETTINGS).write_text(settings.model_dump_json())
    busy, removals, reports = Busy(), Removals(), []
    return Watcher(tmp_path, busy, removals, reports.append, clock=clock), busy, removals, reports  # type: ignore[arg-type]


def status(tmp_path: Path) -> WatchStatus:
    return WatchStatus.model_validate_json((tmp_path / STATUS).read_text())


def test_idle_minutes_count_from_the_last_activity(tmp_path: Path) -> None:
    clock = Clock()
    watch, busy, removals, _ = watcher(tmp_path, clock, idle=1)
    clock.now += 50
    assert watch.check() and removals.calls == []
    busy.answer = "run r1 is running"
    clock.now += 600
    assert watch.check() and status(tmp_path).busy == "run r1 is running"
    busy.answer = ""
    clock.now += 59
    assert watch.check() and status(tmp_path).state == "watching"
    busy.answer = "an SSH session on node1"
    clock.now += 30
    assert watch.check()
    busy.answer = ""
    clock.now += 61
    assert not watch.check()
    assert removals.calls == [("idle", "after 1 idle minute")] and status(tmp_path).state == "removing"


def test_the_deadline_comes_whatever_runs(tmp_path: Path) -> None:
    clock = Clock()
    watch, busy, removals, _ = watcher(tmp_path, clock, idle=0, max_hours=0.5, created_at=clock.now - 1700)
    busy.answer = "run r1 is running"
    assert watch.check()
    clock.now += 100
    assert not watch.check()
    assert removals.calls == [("deadline", "at its max_hours deadline (0.5 h)")]


def test_settings_are_read_at_every_check_and_off_ends_the_agent(tmp_path: Path) -> None:
    clock = Clock()
    watch, _, removals, _ = watcher(tmp_path, clock, idle=1)
    clock.now += 50
    assert watch.check()
    (tmp_path / SETTINGS).write_text(AutoStop(idle_minutes=5, created_at=clock.now).model_dump_json())
    clock.now += 60
    assert watch.check() and removals.calls == []   # `up --idle-minutes 5` took effect in place
    (tmp_path / SETTINGS).write_text(AutoStop(idle_minutes=0, created_at=clock.now).model_dump_json())
    assert not watch.check() and status(tmp_path).state == "off" and removals.calls == []


def test_a_failed_check_is_not_idleness(tmp_path: Path) -> None:
    clock = Clock()
    watch, busy, removals, reports = watcher(tmp_path, clock, idle=1)
    busy.answer = OSError("no route to host")
    for _ in range(5):
        clock.now += 60
        assert watch.check()
    assert removals.calls == [] and "could not check the cluster's activity" in reports[-1]


def test_a_removal_that_fails_is_tried_again_later(tmp_path: Path) -> None:
    clock = Clock()
    watch, _, removals, reports = watcher(tmp_path, clock, idle=1)
    removals.fail = BusyError("cluster 'c' is busy: `train --run r2` (pid 7) is running on it")
    clock.now += 61
    assert watch.check() and "removal put off" in reports[-1]
    removals.fail = None
    clock.now += 15
    assert not watch.check() and removals.calls == [("idle", "after 1 idle minute")]


def test_one_watch_agent_per_cluster(tmp_path: Path) -> None:
    clock = Clock()
    watch, _, removals, reports = watcher(tmp_path, clock, idle=1)
    with open(tmp_path / "watch.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert watch.run() == 0
    assert reports == ["another watch agent watches this cluster"] and removals.calls == []


@pytest.mark.parametrize(("values", "says"), [
    ({"idle_minutes": -1}, "greater than or equal to 0"),
    ({"idle_minutes": "soon"}, "valid number"),
    ({"max_hours": 0.1}, "max_hours 0.1 is shorter than an `up` on aws can take (15 minutes)"),
    ({"max_hours": 0.01, "provider": "local"}, "max_hours 0.01 is shorter than an `up` on local can take"),
])
def test_bad_autostop_values_are_refused(values: dict, says: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        ClusterConfig.model_validate(values)
    assert says in str(caught.value)


def test_zero_turns_either_off() -> None:
    config = ClusterConfig.model_validate({"idle_minutes": 0, "max_hours": 0})
    assert AutoStop(idle_minutes=config.idle_minutes, max_hours=config.max_hours or None, created_at=0).off


class Nodes:
    def node_list(self) -> list[Node]:
        return [Node("master", "i-1", "10.0.0.1", "10.0.0.1", Role.MASTER, "spot"),
                Node("node1", "i-2", "10.0.0.2", "10.0.0.2", Role.WORKER, "spot")]


class BeatShell:
    def __init__(self) -> None:
        self.commands: list[tuple[list[str], str]] = []

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        self.commands.append(([n.name for n in nodes], command))
        return {n.name: CommandResult(n.name, 0 if n.is_master else 255, "", "") for n in nodes}


def test_with_the_switch_on_the_watch_stays_to_beat_once_a_minute(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    clock, shell, reports, shipped = Clock(), BeatShell(), [], []
    monkeypatch.setattr(heartbeat, "sync_tree", lambda _shell, nodes, *_: shipped.append([n.name for n in nodes]))
    settings = AutoStop(idle_minutes=0, created_at=clock.now, orphan_minutes=15)
    (tmp_path / SETTINGS).write_text(settings.model_dump_json())
    beat = heartbeat.Heartbeat(Nodes, shell, "sudo -n shutdown -h now", reports.append)  # type: ignore[arg-type]
    watch = Watcher(tmp_path, Busy(), Removals(), reports.append, beat, clock=clock)  # type: ignore[arg-type]
    for _ in range(5):  # 15 s apart: one beat
        assert watch.check()
        clock.now += 15
    assert [nodes for nodes, _ in shell.commands] == [["master", "node1"], ["master", "node1"]]
    assert "15 > " in shell.commands[0][1] and "'sudo -n shutdown -h now'" in shell.commands[0][1]
    assert shipped == [["master", "node1"]]  # the node package, once, before the first beat
    assert reports == ["no heartbeat reached node1", "no heartbeat reached node1"]
    assert status(tmp_path).state == "watching" and not settings.off
    assert "powers itself off" in settings.describe()
