"""Which of this machine's CPUs a new instance's container runs on.

Every container shares this machine's cores, while each EC2 instance has its own. Left to see every
core, each node's topology probe gives its rank one OpenMP thread per core, and with three 2-thread
ranks of one cluster beside another cluster's ranks on 2 cores, a step measured 3.6x slower than with
one thread per rank. Like the local provider's nodes, each container gets its own share instead."""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable


def least_used_cpu(in_use: Iterable[int], allowed: Iterable[int] | None = None) -> int:
    """The allowed CPU with the fewest running containers on it; the lowest-numbered on a tie."""
    cpus = sorted(allowed if allowed is not None else os.sched_getaffinity(0))
    counts = Counter(in_use)
    return min(cpus, key=lambda cpu: (counts[cpu], cpu))
