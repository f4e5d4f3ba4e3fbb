"""The one line that names what failed in a training job: from the ranks' events, or from what Intel MPI
and Python printed."""
from __future__ import annotations

import re
from pathlib import Path

from xeoncluster.agent.attempt import Outcome
from xeoncluster.node.events.events import EXIT_STOPPED, FailedEvent, StoppedEvent
from xeoncluster.providers.base import Node

# What a rank raises when another rank vanished under it (gloo, oneCCL, the OS): the rank that reports it is
# a witness, not the cause.
PEER_LOST = re.compile(r"Connection (?:reset|closed) by peer|Broken pipe|Connection refused|peer.*(?:lost|closed)",
                       re.I)
EXITED = re.compile(r"RANK (\d+) PID \d+ RUNNING AT (\S+)\s*\n=?\s*EXIT (?:STATUS|CODE): (\d+)")
KILLED = re.compile(r"RANK (\d+) PID \d+ RUNNING AT (\S+)\s*\n=?\s*KILLED BY SIGNAL: (\d+)(?: \((\w+)\))?")


def failure_line(log_text: str, exit_code: int) -> str:
    """Name the rank and node that failed, from what Intel MPI / Python printed."""
    own = re.findall(r"^\[(\d+)\] (training: .+)$", log_text, re.M)
    if own:
        rank, message = own[0]
        return f"rank {rank}: {message}"
    killed = killed_rank(log_text)
    if killed is not None:
        return killed
    exited = EXITED.search(log_text)
    if exited:
        return f"training failed: rank {exited.group(1)} on {exited.group(2)} exited with code {exited.group(3)}"
    lost = re.search(r"(?:ssh: connect to host|Could not resolve hostname|connection to) (\S+)", log_text)
    if lost:
        return f"training failed: cannot reach node {lost.group(1).rstrip(':')} from the master"
    errors = [line for line in log_text.splitlines() if re.search(r"\b(Error|error:)", line)]
    if errors:
        return f"training failed (exit {exit_code}): {errors[-1].strip()[:200]}"
    return f"training failed with exit code {exit_code}"


def killed_rank(log_text: str) -> str | None:
    """Hydra's report of a rank ended by a signal. It comes before a rank that exited with an error: a
    killed rank takes its peers down with it, not the other way round."""
    killed = KILLED.search(log_text)
    if killed is None:
        return None
    name = f" ({killed.group(4)})" if killed.group(4) else ""
    return f"training failed: rank {killed.group(1)} on {killed.group(2)} was killed by signal {killed.group(3)}{name}"


def outcome_line(outcome: Outcome, nodes: list[Node], log: Path) -> str:
    """Why a launch failed: a rank's own report, a lost master, a stop that was not recovered, or the log."""
    failed = outcome.last(FailedEvent)
    if failed is not None:
        killed = killed_rank(log.read_text(errors="replace")) if PEER_LOST.search(failed.reason) else None
        if killed is not None:
            return killed
        node = next((n.name for n in nodes if n.private_ip == failed.node), failed.node)
        lines = " | ".join(failed.lines[-3:]) if failed.lines and failed.lines[-1] != failed.reason else ""
        return f"rank {failed.rank} on {node} failed: {failed.reason}" + (f" ({lines})" if lines else "")
    if outcome.exit_code < 0:
        return f"lost connection to {nodes[0].name} (master): {outcome.detail}"
    if outcome.exit_code == EXIT_STOPPED:
        stopped = outcome.last(StoppedEvent)
        at = f" at step {stopped.step}" if stopped and stopped.step is not None else ""
        return f"training stopped{at} (checkpoint saved) and was not recovered"
    return failure_line(log.read_text(errors="replace"), outcome.exit_code)


def failed_exit_code(outcome: Outcome) -> int:
    return outcome.exit_code if 0 < outcome.exit_code < 128 and outcome.exit_code != EXIT_STOPPED else 1
