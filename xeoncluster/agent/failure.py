"""The one line that names what failed in a training job, from what Intel MPI and Python printed."""
from __future__ import annotations

import re


def failure_line(log_text: str, exit_code: int) -> str:
    """Name the rank and node that failed, from what Intel MPI / Python printed."""
    own = re.findall(r"^\[(\d+)\] (training: .+)$", log_text, re.M)
    if own:
        rank, message = own[0]
        return f"rank {rank}: {message}"
    bad = re.search(r"RANK (\d+) PID \d+ RUNNING AT (\S+)\s*\n=?\s*(KILLED BY SIGNAL: (\d+)(?: \((\w+)\))?|"
                    r"EXIT (?:STATUS|CODE): (\d+))", log_text)
    if bad:
        rank, node = bad.group(1), bad.group(2)
        if bad.group(4):
            name = f" ({bad.group(5)})" if bad.group(5) else ""
            return f"training failed: rank {rank} on {node} was killed by signal {bad.group(4)}{name}"
        return f"training failed: rank {rank} on {node} exited with code {bad.group(6)}"
    lost = re.search(r"(?:ssh: connect to host|Could not resolve hostname|connection to) (\S+)", log_text)
    if lost:
        return f"training failed: cannot reach node {lost.group(1).rstrip(':')} from the master"
    errors = [line for line in log_text.splitlines() if re.search(r"\b(Error|error:)", line)]
    if errors:
        return f"training failed (exit {exit_code}): {errors[-1].strip()[:200]}"
    return f"training failed with exit code {exit_code}"
