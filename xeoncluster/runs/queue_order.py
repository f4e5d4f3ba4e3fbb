"""The order a cluster's runs go in, for the agents that wait their turn and for the CLI that says
where a run stands: the started run first, then the waiting ones in the order `train` submitted them."""
from __future__ import annotations

from collections.abc import Callable, Iterable

from xeoncluster.runs.record import RunRecord


def order(record: RunRecord) -> tuple[float, str]:
    return (record.submitted_at, record.run)


def line_up(records: Iterable[RunRecord], pending: Callable[[RunRecord], bool]) -> list[RunRecord]:
    """The runs still to end (`pending` says whether one is), in the order they go."""
    todo = [r for r in records if not r.state.finished and pending(r)]
    return [r for r in todo if not r.waiting] + sorted((r for r in todo if r.waiting), key=order)


def ahead_of(line: list[RunRecord], run: str) -> list[RunRecord]:
    """What must end before `run` starts: the runs in line before it (all of them, if it is not in line)."""
    names = [r.run for r in line]
    return line[:names.index(run)] if run in names else list(line)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def place_line(run: str, ahead: list[RunRecord]) -> str:
    """`queued: 2nd in line, after r1` for a run with one run ahead of it."""
    if not ahead:
        return f"run {run} is next in line"
    return f"run {run} queued: {ordinal(len(ahead) + 1)} in line, after {ahead[-1].run}"


def busy_line(line: list[RunRecord]) -> str:
    """`run r1 is running (step 40); 2 queued: r2, r3` for the active run and the queue."""
    started = [r for r in line if not r.waiting]
    queued = [r.run for r in line if r.waiting]
    parts = [f"run {r.run} is {r.state.value} (step {r.step})" for r in started]
    if queued:
        parts.append(f"{len(queued)} queued: {', '.join(queued)}")
    return "; ".join(parts)
