"""A repair and the run queue exclude each other, with the real lock file and real processes: while `up`'s
lease holds the queue, a queued run's agent (another process, taking its turn under the queue's flock)
does not start, and it starts once the lease ends or runs out; two repairs never hold it at once."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from xeoncluster.agent.queue import Queue
from xeoncluster.cluster.state import StateDir
from xeoncluster.core.errors import BusyError
from xeoncluster.runs import queue_hold
from xeoncluster.runs.host import LocalHost
from xeoncluster.runs.record import RunFiles, RunRecord, RunState
from xeoncluster.wire.contract import QUEUE_HELD_ELSEWHERE

CLUSTER = "rq"

# A queued run's agent taking its turn, as agent/run_turn.py does: it marks the run started when it may.
WAITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from xeoncluster.agent.queue import Queue
    runs, run, marker = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    while not Queue(runs, alive=lambda pid: False).take_turn(run, lambda: marker.write_text("started")).taken:
        time.sleep(0.05)
""")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XEONCLUSTER_HOME", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                                   os.environ.get("PYTHONPATH")])))
    return tmp_path


@pytest.fixture
def waiter(home: Path) -> Iterator[tuple[Callable[[], None], Path]]:
    """(start a queued run's agent, the file it writes when its run starts)."""
    runs = StateDir(CLUSTER, home).runs
    (runs / "q").mkdir(parents=True)
    RunFiles(runs / "q").save(RunRecord(run="q", cluster=CLUSTER, task="squad", state=RunState.QUEUED,
                                        submitted_at=time.time()))
    marker = home / "started"
    procs: list[subprocess.Popen[bytes]] = []
    yield lambda: procs.append(subprocess.Popen([sys.executable, "-c", WAITER, str(runs), "q", str(marker)])), marker
    for proc in procs:
        proc.kill()
        proc.wait()


def started_within(marker: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if marker.exists():
            return True
        time.sleep(0.05)
    return False


def local_ctx(home: Path) -> SimpleNamespace:
    """What queue_held reads of a command's context, for a cluster whose agent runs on this machine."""
    warnings: list[str] = []
    return SimpleNamespace(config=SimpleNamespace(name=CLUSTER), state=StateDir(CLUSTER, home), provider=object(),
                           shell=lambda: SimpleNamespace(close=lambda: None),
                           reporter=SimpleNamespace(warn=warnings.append), warnings=warnings)


def test_a_queued_run_does_not_start_while_a_repair_holds_the_queue_and_starts_after(home: Path, waiter) -> None:
    start, marker = waiter
    with queue_hold.queue_held(local_ctx(home), SimpleNamespace(name=CLUSTER)):
        start()
        assert not started_within(marker, 2.0), "a queued run started while the repair held the queue"
    assert started_within(marker, 10.0), "the queued run did not start once the repair ended"


def test_a_hold_nobody_renews_runs_out_and_the_queue_goes_on(home: Path, waiter) -> None:
    """A laptop that crashed mid-repair: its lease is never released, and the queue waits only until it expires."""
    start, marker = waiter
    host = LocalHost(str(home), sys.executable)
    assert host.call(["hold", CLUSTER, "up-crashed", "4"]).ok
    start()
    assert not started_within(marker, 1.5)
    assert started_within(marker, 10.0)


def test_two_repairs_never_hold_the_queue_at_once(home: Path) -> None:
    host = LocalHost(str(home), sys.executable)
    assert host.call(["hold", CLUSTER, "up-one", "60"]).ok
    second = host.call(["hold", CLUSTER, "up-two", "60"])
    assert second.exit_code == QUEUE_HELD_ELSEWHERE and "held by up-one" in second.stderr
    assert host.call(["hold", CLUSTER, "up-one", "60"]).ok, "the holder renews its own lease"
    with pytest.raises(BusyError, match="being repaired by another `up`"), \
            queue_hold.queue_held(local_ctx(home), SimpleNamespace(name=CLUSTER)):
        pass
    assert host.call(["release", CLUSTER, "up-two"]).ok
    assert host.call(["hold", CLUSTER, "up-two", "60"]).exit_code == QUEUE_HELD_ELSEWHERE, "only its holder ends it"
    assert host.call(["release", CLUSTER, "up-one"]).ok
    assert host.call(["hold", CLUSTER, "up-two", "60"]).ok


def test_the_hold_is_renewed_while_the_repair_works(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_hold, "LEASE_SECONDS", 3.0)
    monkeypatch.setattr(queue_hold, "RENEW_SECONDS", 0.5)
    runs = StateDir(CLUSTER, home).runs
    with queue_hold.queue_held(local_ctx(home), SimpleNamespace(name=CLUSTER)):
        time.sleep(4.5)  # longer than the lease: only renewals keep it
        assert not Queue(runs).take_turn("x", lambda: pytest.fail("started under a repair")).taken
    assert Queue(runs).take_turn("x", lambda: None).taken
