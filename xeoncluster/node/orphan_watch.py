"""`python -m xeoncluster.node.orphan_watch FOLDER --poweroff CMD`: a node's dead-man switch.

The cluster's watch agent touches FOLDER/heartbeat on every node about once a minute (and starts this
watch there if it is not running). A node that has heard nothing for the minutes in FOLDER/minutes, and
has no rank of a run and nobody logged in, was left behind by a master that is gone: it powers itself
off, so that it stops billing (on EC2 a node's own shutdown terminates it: the tool launches with
InstanceInitiatedShutdownBehavior=terminate). Its clock is the node's own, which also stamps the
heartbeat, so the two never disagree.

Before that, a worker tries to take the master's place: after TAKEOVER_SECONDS of silence (or half the
orphan minutes, if less) it runs the command the watch agent left in FOLDER/takeover.json
(agent/takeover.py). That command finds whether the master is gone and whether another worker is
already taking over; a node that could not take over powers off at the orphan minutes as before.

It imports nothing outside the standard library: it runs beside the ranks, on the node's Python.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HEARTBEAT = "heartbeat"
MINUTES = "minutes"   # written with every beat: the watch agent's orphan_minutes, 0 to stop the switch
LOCK = "orphan.lock"
TAKEOVER = "takeover.json"  # on a worker: {"argv": [...]}, how it takes the master's place
CHECK_SECONDS = 30.0
TAKEOVER_SECONDS = 150.0  # two missed beats and a half: one late beat is no loss
# A rank of a built-in task or of a user's script, and the MPI launcher and proxies that start them.
RANK_MARKS = (b"\0-m\0xeoncluster.node", b"mpiexec", b"hydra_pmi_proxy")
# A node's warm rank server (xeoncluster/node/warm_start) outlives the ranks it forked, by design: alone, it
# is no rank. Its forked ranks carry its command line too, but the processes MPI started for them are there.
WARM_SERVER_MARK = b"\0-m\0xeoncluster.node.warm_start\0"
SESSION_MARK = b"sshd"  # "sshd: ubuntu@pts/0" (OpenSSH 9.8+: "sshd-session: ubuntu@pts/0")


def command_lines() -> Iterator[bytes]:
    """The command lines of this node's processes: on a cloud node, every process; where nodes share a
    machine's processes (the local provider, a test), those in this network namespace, as Activity's
    SESSIONS counts them. A process whose namespace cannot be read counts."""
    mine = os.readlink("/proc/self/ns/net")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if os.readlink(entry / "ns" / "net") != mine:
                continue
        except OSError:
            pass
        try:
            yield b"\0" + (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile


def in_use() -> str:
    """What keeps this node from being orphaned now: a rank, or somebody logged in; "" for nothing."""
    for line in command_lines():
        if WARM_SERVER_MARK in line:
            continue
        if any(mark in line for mark in RANK_MARKS):
            return "a rank runs"
        if line.startswith(b"\0" + SESSION_MARK) and b"@pts/" in line:
            return "somebody is logged in"
    return ""


def read_minutes(folder: Path) -> float:
    try:
        return max(0.0, float((folder / MINUTES).read_text().strip()))
    except (OSError, ValueError):
        return 0.0


def silence(folder: Path, now: float) -> float:
    """Seconds since the last heartbeat; 0 when there never was one (this watch was started by a beat)."""
    try:
        return max(0.0, now - (folder / HEARTBEAT).stat().st_mtime)
    except OSError:
        return 0.0


def orphaned(folder: Path, now: float) -> str:
    """Why this node must power off now, or "" while it must not."""
    minutes = read_minutes(folder)
    quiet = silence(folder, now)
    if not minutes or quiet < minutes * 60 or in_use():
        return ""
    return f"no word from the cluster's agents for {quiet / 60:.1f} minutes (orphan_minutes {minutes:g})"


def takeover_argv(folder: Path) -> list[str] | None:
    try:
        argv = json.loads((folder / TAKEOVER).read_text())["argv"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return argv if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) else None


def takeover_due(folder: Path, now: float) -> list[str] | None:
    """The takeover command, when the silence is long enough to try it."""
    minutes = read_minutes(folder)
    argv = takeover_argv(folder)
    if not minutes or argv is None or silence(folder, now) < min(TAKEOVER_SECONDS, minutes * 30):
        return None
    return argv


def try_takeover(argv: list[str]) -> None:
    """Its lines go to this watch's log; its end, whatever it is, leaves the switch to decide."""
    say(f"no word from the master: trying to take its place ({argv[-2:]})")
    code = subprocess.run(argv, check=False, stdin=subprocess.DEVNULL).returncode
    say(f"takeover ended with exit code {code}")


def say(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} orphan watch: {line}", flush=True)


def watch(folder: Path, poweroff: list[str], every: float) -> int:
    while read_minutes(folder):
        argv = takeover_due(folder, time.time())
        if argv is not None:
            try_takeover(argv)
        why = orphaned(folder, time.time())
        if why:
            say(f"{why}: powering off ({shlex.join(poweroff)})")
            return subprocess.run(poweroff, check=False).returncode
        time.sleep(every)
    say("switched off (orphan_minutes 0)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xeoncluster.node.orphan_watch")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--poweroff", required=True, help="the command that powers this node off for good")
    parser.add_argument("--every", type=float, default=CHECK_SECONDS, help="seconds between looks")
    args = parser.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    with open(args.folder / LOCK, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # one watch per node: a beat that started a second one meanwhile
        say(f"watching {args.folder / HEARTBEAT}")
        return watch(args.folder, shlex.split(args.poweroff), args.every)


if __name__ == "__main__":
    sys.exit(main())
