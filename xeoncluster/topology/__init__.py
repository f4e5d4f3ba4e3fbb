"""A node's CPU topology (probe), the ranks and environment planned for it, and the mpiexec argv."""
from xeoncluster.topology.mpirun import mpirun_command, render_command
from xeoncluster.topology.probe import PROBE_SCRIPT, CpuTopology, parse_probe, probe_command
from xeoncluster.topology.ranks import MASTER_PORT, RankPlan, plan_ranks

__all__ = ["MASTER_PORT", "PROBE_SCRIPT", "CpuTopology", "RankPlan", "mpirun_command", "parse_probe", "plan_ranks",
           "probe_command", "render_command"]
