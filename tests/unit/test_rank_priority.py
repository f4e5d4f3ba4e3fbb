"""The tests' rank priority: a rank past its start is reniced, every thread of it, and nothing else is."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import rank_priority

HELD = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\ntime.sleep(60)\n"


def test_a_rank_past_its_start_is_reniced_with_its_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "xeoncluster"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "node.py").write_text(HELD)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    rank = subprocess.Popen([sys.executable, "-m", "xeoncluster.node", "squad"], cwd=tmp_path, env=env)
    other = subprocess.Popen([sys.executable, "-c", HELD, "xeoncluster.node"], env=env)
    try:
        time.sleep(0.5)
        priority = rank_priority.RankPriority()
        monkeypatch.setattr(rank_priority, "PAST_START_SECONDS", 3600.0)
        priority.scan()
        assert [p.pid for p in priority.pending] == [rank.pid]
        assert os.getpriority(os.PRIO_PROCESS, rank.pid) == 0
        monkeypatch.setattr(rank_priority, "PAST_START_SECONDS", 0.0)
        priority.scan()
        assert not priority.pending
        tasks = [int(t) for t in os.listdir(f"/proc/{rank.pid}/task")]
        assert len(tasks) == 2 and {os.getpriority(os.PRIO_PROCESS, t) for t in tasks} == {rank_priority.NICE}
        assert os.getpriority(os.PRIO_PROCESS, other.pid) == 0
    finally:
        rank.kill()
        other.kill()
        rank.wait()
        other.wait()
