"""The mpiexec argv for a RankPlan, and its one-line shell form."""
from __future__ import annotations

import shlex
from collections.abc import Sequence

from xeoncluster.topology.ranks import RankPlan


def mpirun_command(
    mpiexec: str, hostfile: str, plan: RankPlan, program: Sequence[str]
) -> list[str]:
    if not program:
        raise ValueError("program must name the command each rank runs")
    argv = [mpiexec, "-f", hostfile, "-n", str(plan.world_size), "-ppn", str(plan.ranks_per_node)]
    for key, value in plan.env:
        argv += ["-genv", key, value]
    return argv + list(program)


def render_command(argv: Sequence[str]) -> str:
    """One shell-quoted line that can be pasted into a terminal."""
    return shlex.join(argv)
