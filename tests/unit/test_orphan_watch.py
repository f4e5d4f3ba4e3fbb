"""The nodes' dead-man switch, as real processes on this machine: a node that hears no heartbeat for
orphan_minutes, with no rank running and nobody logged in, runs its power-off command; while beats
come, or while a rank runs, it never does. The watch agent's beat starts one watch per node."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xeoncluster.agent.heartbeat import beat_command
from xeoncluster.node import orphan_watch

REPO = Path(__file__).resolve().parents[2]
EVERY = "0.2"


def start_watch(folder: Path, minutes: float, beside: str = "") -> tuple[subprocess.Popen[bytes], Path]:
    """The watch in a network namespace of its own, as on a node of its own: it sees only the processes
    started there (`beside`, a shell command run in the background first), not the other tests'."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "minutes").write_text(f"{minutes}\n")
    (folder / "heartbeat").touch()
    off = folder / "powered-off"
    watch = shlex.join([sys.executable, "-m", "xeoncluster.node.orphan_watch", str(folder),
                        "--poweroff", f"touch {off}", "--every", EVERY])
    node = subprocess.Popen(["unshare", "--net", "sh", "-c", f"{beside + ' & ' if beside else ''}{watch}"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return node, off


def stop(node: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node.pid, signal.SIGKILL)
    node.wait()


def wait_for(path: Path, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists():
            return True
        time.sleep(0.1)
    return path.exists()


def test_a_node_that_hears_nothing_powers_itself_off(tmp_path: Path) -> None:
    node, off = start_watch(tmp_path / "orphan", minutes=0.02)  # 1.2 s
    try:
        assert wait_for(off, 15)
        assert node.wait(10) == 0
    finally:
        stop(node)


def test_it_never_fires_while_heartbeats_come(tmp_path: Path) -> None:
    folder = tmp_path / "orphan"
    node, off = start_watch(folder, minutes=0.02)
    try:
        for _ in range(25):  # 5 s: four times orphan_minutes
            (folder / "heartbeat").touch()
            time.sleep(0.2)
        assert not off.exists() and node.poll() is None
        assert wait_for(off, 15)  # the beats stop: now it fires
    finally:
        stop(node)


def test_it_never_fires_while_a_rank_runs(tmp_path: Path) -> None:
    rank = shlex.join([sys.executable, "-c", "import time; time.sleep(4)", "-m", "xeoncluster.node", "squad"])
    node, off = start_watch(tmp_path / "orphan", minutes=0.02, beside=rank)
    try:
        time.sleep(3)
        assert not off.exists() and node.poll() is None
        assert wait_for(off, 15)  # the rank has ended: now it fires
    finally:
        stop(node)


def test_a_warm_rank_server_alone_does_not_keep_the_node(tmp_path: Path) -> None:
    """The server ranks are forked from (xeoncluster/node/warm_start) waits for the next job, ranks or not."""
    server = shlex.join([sys.executable, "-c", "import time; time.sleep(30)", "-m", "xeoncluster.node.warm_start",
                         "xeoncluster-warm-0-0"])
    node, off = start_watch(tmp_path / "orphan", minutes=0.02, beside=server)
    try:
        assert wait_for(off, 15)
    finally:
        stop(node)


def test_zero_minutes_ends_the_watch_without_firing(tmp_path: Path) -> None:
    node, off = start_watch(tmp_path / "orphan", minutes=0)
    assert node.wait(10) == 0 and not off.exists()


def test_the_beat_touches_the_heartbeat_and_starts_one_watch(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "venv" / "bin").mkdir(parents=True)
    (home / "venv" / "bin" / "python").symlink_to(sys.executable)
    (home / "xeoncluster" / "lib").mkdir(parents=True)
    (home / "xeoncluster" / "lib" / "xeoncluster").symlink_to(REPO / "xeoncluster")
    env = {**os.environ, "HOME": str(home)}
    folder = home / "xeoncluster" / "orphan"
    command = beat_command(15, f"touch {tmp_path / 'off'}")
    try:
        for _ in range(2):
            subprocess.run(["bash", "-c", command], env=env, check=True, timeout=30)
            time.sleep(1.5)
        assert (folder / "minutes").read_text().strip() == "15" and (folder / "heartbeat").exists()
        held = subprocess.run(["flock", "-n", str(folder / "orphan.lock"), "true"], check=False)
        assert held.returncode != 0  # a watch holds the lock
        assert len(watches(folder)) == 1
    finally:
        (folder / "minutes").write_text("0\n")  # the watch ends at its next look
        for pid in watches(folder):
            os.kill(pid, 9)
    assert not (tmp_path / "off").exists()


def watches(folder: Path) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"orphan_watch {folder}"], capture_output=True, text=True, check=False)
    return [int(pid) for pid in found.stdout.split()]


@pytest.mark.parametrize(("minutes", "age", "expected"), [(15, 60, False), (15, 901, True), (0, 10_000, False)])
def test_the_decision(tmp_path: Path, minutes: float, age: float, expected: bool,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(orphan_watch, "in_use", lambda: "")  # the processes' part: the tests above
    (tmp_path / "minutes").write_text(str(minutes))
    (tmp_path / "heartbeat").touch()
    beat = (tmp_path / "heartbeat").stat().st_mtime
    assert bool(orphan_watch.orphaned(tmp_path, beat + age)) == expected


def test_a_worker_tries_to_take_over_before_it_powers_off(tmp_path: Path) -> None:
    """The takeover command runs once the silence passes half the orphan minutes; one that brings the
    beats back (a new master's) keeps the node on; while beats come it never runs."""
    folder = tmp_path / "orphan"
    tried = tmp_path / "tried"
    argv = ["sh", "-c", f"echo x >> {tried} && touch {folder / 'heartbeat'}"]
    folder.mkdir()
    (folder / orphan_watch.TAKEOVER).write_text(json.dumps({"argv": argv}))
    node, off = start_watch(folder, minutes=0.05)  # takeover after 1.5 s, power-off after 3 s
    try:
        for _ in range(5):  # 1 s of beats: no try
            (folder / "heartbeat").touch()
            time.sleep(0.2)
        assert not tried.exists()
        assert wait_for(tried, 10)
        time.sleep(4)  # each try brought the beats back: still on, and it tries again when they stop
        assert not off.exists() and node.poll() is None
        assert len(tried.read_text().split()) >= 2
    finally:
        stop(node)


def test_a_failed_takeover_still_powers_off(tmp_path: Path) -> None:
    folder = tmp_path / "orphan"
    folder.mkdir()
    (folder / orphan_watch.TAKEOVER).write_text(json.dumps({"argv": ["false"]}))
    node, off = start_watch(folder, minutes=0.02)
    try:
        assert wait_for(off, 15)
    finally:
        stop(node)


@pytest.mark.parametrize("text", ['{"argv": "rm -rf /"}', '{"argv": []}', '{"argv": [1]}', "not json", "{}"])
def test_a_takeover_file_that_is_no_argv_is_never_run(tmp_path: Path, text: str) -> None:
    (tmp_path / orphan_watch.TAKEOVER).write_text(text)
    assert orphan_watch.takeover_argv(tmp_path) is None
