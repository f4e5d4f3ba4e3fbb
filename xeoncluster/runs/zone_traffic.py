"""What a run's gradients cost when its nodes sit in more than one zone.

DDP all-reduces every optimizer step's gradients over a ring of its ranks (in node order): each rank
sends about 2(N-1)/N times the gradient bytes to the next, so each link of the ring that joins two
zones carries that much per step, billed per GB by the provider. An estimate, to say before the bill
does: gradients are taken as fp32 (4 bytes a parameter; bf16 gradient communication halves it).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from xeoncluster.cluster.untrusted import Amount, Count

FP32_BYTES = 4
GB = 1e9


class ZoneTraffic(BaseModel):
    """The estimate a run's record carries: per step always, per hour once the run's pace is known."""

    zones: Count                      # how many zones the run's nodes sit in
    gb_per_step: Amount               # crossing zones, every optimizer step
    usd_per_gb: Amount
    gb_per_hour: Amount | None = None  # at the measured steps/s; None before the first steps
    usd_per_hour: Amount | None = None

    def describe(self) -> str:
        rate = (f"about {self.gb_per_hour:.1f} GB/h, ${self.usd_per_hour:.2f}/h at ${self.usd_per_gb:.2f}/GB"
                if self.gb_per_hour is not None and self.usd_per_hour is not None
                else f"${self.usd_per_gb:.2f}/GB; the hourly figure follows the run's pace")
        return (f"nodes in {self.zones} zones: DDP sends about {self.gb_per_step:.3f} GB across zones per step "
                f"({rate})")


def crossing_links(zones: Sequence[str | None]) -> int:
    """The links of the ring (node i to node i+1, the last back to the first) that join two zones."""
    if len(zones) < 2:
        return 0
    return sum(a != b for a, b in zip(zones, [*zones[1:], zones[0]], strict=True))


def zone_traffic(parameters: int, zones: Sequence[str | None], usd_per_gb: float,
                 steps_per_second: float | None = None) -> ZoneTraffic | None:
    """None while every node sits in one zone (or none has a zone)."""
    if None in zones or not (links := crossing_links(zones)):
        return None
    nodes = len(zones)
    per_link = 2 * (nodes - 1) / nodes * parameters * FP32_BYTES / GB
    gb_per_step = links * per_link
    traffic = ZoneTraffic(zones=len(set(zones)), gb_per_step=gb_per_step, usd_per_gb=usd_per_gb)
    if steps_per_second:
        gb_per_hour = gb_per_step * steps_per_second * 3600
        traffic.gb_per_hour, traffic.usd_per_hour = gb_per_hour, gb_per_hour * usd_per_gb
    return traffic


@dataclass(frozen=True)
class ZoneSpread:
    """What the estimate needs besides the pace: the model's size, the nodes' zones in rank order, the price."""

    parameters: int
    zones: tuple[str | None, ...]
    usd_per_gb: float

    def estimate(self, steps_per_second: float | None = None) -> ZoneTraffic | None:
        return zone_traffic(self.parameters, self.zones, self.usd_per_gb, steps_per_second)
