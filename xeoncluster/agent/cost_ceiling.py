"""A run's spending ceiling (`train --max-cost USD`): once the run's cost (its nodes' $/hour times the
hours it has held them, the record's `cost_usd`) reaches it, the run stops the way the cluster's deadline
stops it: the ranks checkpoint, the agent stores the checkpoint, and the record says why in one line."""
from __future__ import annotations

from xeoncluster.job.train_plan import resume_line
from xeoncluster.runs.record import CEILING_STOP


def reached(cost_usd: float, max_cost: float | None) -> str:
    """Why the run must stop now, or "" while it is under its ceiling (or has none)."""
    if max_cost is None or cost_usd < max_cost:
        return ""
    return f"{CEILING_STOP}: ${cost_usd:.4f} spent of ${max_cost:g}"


def stopped_line(why: str, where: str, command: str) -> str:
    """The record's one line for a run stopped at its ceiling: where its checkpoint is, and how it goes on."""
    kept = f"; its checkpoint is stored in {where}" if where else "; its checkpoint is on the master"
    return f"{why}{kept}; continue it with `{resume_line(command)}` (add --max-cost for a new ceiling)"
