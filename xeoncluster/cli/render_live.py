"""An active run's pace and its nodes' use, as `runs` and `status` print them. Formatting only."""
from __future__ import annotations

from typing import TYPE_CHECKING

from xeoncluster.runs.record import CEILING_STOP

if TYPE_CHECKING:
    from xeoncluster.runs.record import RunRecord



def clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def pace_line(record: RunRecord) -> str:
    live = record.live
    parts = [f"run {record.run}: step {record.step}/{record.total_steps or '?'}"]
    if live.loss is not None:
        parts.append(f"loss {live.loss:.4f}")
    if live.steps_per_second:
        parts.append(f"{live.steps_per_second:.2f} steps/s")
    if live.eta_seconds is not None:
        parts.append(f"eta {clock(live.eta_seconds)}")
    cost = f"${record.cost_usd:.4f} so far"
    if live.projected_cost_usd is not None:
        cost += f", ${live.projected_cost_usd:.4f} projected at the end"
    return ", ".join([*parts, cost])


def usage_line(record: RunRecord) -> str:
    shown = [f"{name} cpu {use.cpu_percent:.0f}% mem {use.mem_percent:.1f}%" + (" (LOW: far below the others)"
                                                                                if use.low else "")
             for name, use in sorted(record.usage.items())]
    return "  nodes: " + "; ".join(shown) if shown else ""


def zone_line(record: RunRecord) -> str:
    """The run's nodes sat in more than one zone: what its gradients' traffic between them costs."""
    traffic = record.live.zone_traffic
    return f"run {record.run}: {traffic.describe()}" if traffic is not None else ""


def stopped_line(record: RunRecord) -> str:
    """A run its agent stopped at its --max-cost ceiling: why, where its checkpoint is, how it goes on."""
    return f"run {record.run}: {record.error}" if record.error.startswith(CEILING_STOP) else ""


def live_lines(record: RunRecord) -> list[str]:
    if record.state.finished or record.waiting:
        return []
    return [line for line in (pace_line(record), usage_line(record)) if line]
