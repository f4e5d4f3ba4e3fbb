"""Ranks per node and the OpenMP/CCL/Intel MPI environment for a CpuTopology.

Pure functions over frozen dataclasses: `train --dry-run` builds the same plan from a catalog
entry that a real run builds from a probed node, and tests assert on it without any machine.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from xeoncluster.topology.probe import CpuTopology

BACKENDS = ("gloo", "ccl")
MASTER_PORT = "29500"


@dataclass(frozen=True)
class RankPlan:
    nodes: int
    ranks_per_node: int
    threads_per_rank: int
    env: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class _Layout:
    """Physical core ids per rank on one node, split into compute cores and CCL worker cores."""

    cores_per_rank: int
    compute: tuple[tuple[int, ...], ...]
    workers: tuple[tuple[int, ...], ...]

    @property
    def reserved(self) -> int:
        return self.cores_per_rank - len(self.compute[0])


def plan_ranks(
    topo: CpuTopology,
    nodes: int,
    *,
    backend: str,
    ipex: bool,
    ppn: int | None = None,
    threads: int | None = None,
    master_addr: str,
    extra_env: Mapping[str, str] = MappingProxyType({}),
) -> RankPlan:
    _check_inputs(nodes, backend, threads, master_addr)
    ranks = _ranks_per_node(topo, ppn)
    layout = _layout(topo, ranks, _ccl_worker_count(backend, extra_env))
    omp = threads if threads is not None else len(layout.compute[0])
    env = [
        ("MASTER_ADDR", master_addr),
        ("MASTER_PORT", MASTER_PORT),
        ("OMP_NUM_THREADS", str(omp)),
        *_openmp_env(topo),
        *_pinning_env(topo, layout),
        *_ccl_env(topo, layout, backend),
        *_preload_env(topo),
    ]
    notes = _notes(topo, layout, ppn=ppn, threads=threads, omp=omp, ipex=ipex)
    return RankPlan(nodes, ranks, omp, _override(env, extra_env), notes)


def _check_inputs(nodes: int, backend: str, threads: int | None, master_addr: str) -> None:
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    if not master_addr:
        raise ValueError("master_addr must not be empty")


def _ranks_per_node(topo: CpuTopology, ppn: int | None) -> int:
    usable = topo.usable_physical_cores
    if ppn is None:
        return min(topo.sockets, usable)
    if ppn < 1:
        raise ValueError(f"ppn must be at least 1, got {ppn}")
    if ppn > usable:
        raise ValueError(
            f"ppn={ppn} is more than the {usable} usable physical core(s) per node "
            f"({topo.describe()}); use --ppn {usable} or fewer"
        )
    return ppn


def _ccl_worker_count(backend: str, extra_env: Mapping[str, str]) -> int:
    if backend != "ccl":
        return 0
    # A user's --env CCL_WORKER_COUNT=N changes how many cores are reserved, so honour it here
    # rather than only overriding the variable and leaving the affinity list inconsistent.
    raw = extra_env.get("CCL_WORKER_COUNT", "1")
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"CCL_WORKER_COUNT must be a positive integer, got {raw!r}")
    return int(raw)


def _layout(topo: CpuTopology, ranks: int, workers: int) -> _Layout:
    per_rank = topo.usable_physical_cores // ranks
    # Keep at least one compute core; with a single core the worker shares it.
    reserve = min(workers, per_rank - 1)
    compute, worker_ids = [], []
    for rank in range(ranks):
        cores = range(rank * per_rank, (rank + 1) * per_rank)
        compute.append(tuple(cores[: per_rank - reserve]))
        # The last cores of each domain, as oneCCL's own `auto` affinity chooses.
        spare = cores[per_rank - reserve :] or cores[-1:]
        worker_ids.append(tuple(spare[i % len(spare)] for i in range(workers)))
    return _Layout(per_rank, tuple(compute), tuple(worker_ids))


def _openmp_env(topo: CpuTopology) -> list[tuple[str, str]]:
    # KMP_* are read only by Intel OpenMP (libiomp5), which is in use only when preloaded; stock
    # torch wheels use GNU libgomp, which binds with OMP_PROC_BIND/OMP_PLACES instead. Setting both
    # families at once makes libiomp5 warn about conflicting settings, so pick one.
    if topo.iomp:
        # Blocktime 1 ms: idle OpenMP threads stop spinning quickly and leave the cores to the
        # communication threads between steps.
        return [("KMP_AFFINITY", "granularity=fine,compact,1,0"), ("KMP_BLOCKTIME", "1")]
    return [("OMP_PROC_BIND", "close"), ("OMP_PLACES", "cores")]


def _pinning_env(topo: CpuTopology, layout: _Layout) -> list[tuple[str, str]]:
    if topo.restricted:
        # Domains name absolute CPU ids, and the probe cannot say which CPUs the node was
        # confined to; a domain outside them would fail or escape the confinement. Ranks inherit
        # the node's affinity instead.
        return [("I_MPI_PIN", "off")]
    if len(layout.compute) == topo.sockets and layout.reserved == 0:
        return [("I_MPI_PIN_DOMAIN", "socket")]
    return [("I_MPI_PIN_DOMAIN", _masklist(layout.compute))]


def _masklist(domains: Sequence[Sequence[int]]) -> str:
    """Intel MPI's explicit form: one hex mask of logical CPUs per rank, `[m1,...,mn]`.

    Linux numbers the first hardware thread of every core before any sibling thread, so physical
    core i is logical CPU i. Masks hold only those first threads and leave out the CCL worker
    cores; Intel MPI puts whatever no mask names into one extra domain that no rank uses here.
    """
    return "[" + ",".join(hex(sum(1 << core for core in cores)) for cores in domains) + "]"


def _ccl_env(topo: CpuTopology, layout: _Layout, backend: str) -> list[tuple[str, str]]:
    if backend != "ccl":
        return []
    env = [("CCL_WORKER_COUNT", str(len(layout.workers[0])))]
    if not topo.restricted:
        # oneCCL reads one core per worker for every local rank, in rank order.
        ids = (str(core) for workers in layout.workers for core in workers)
        env.append(("CCL_WORKER_AFFINITY", ",".join(ids)))
    return env


def _preload_env(topo: CpuTopology) -> list[tuple[str, str]]:
    libraries = [path for path in (topo.tcmalloc, topo.iomp) if path]
    return [("LD_PRELOAD", ":".join(libraries))] if libraries else []


def _override(
    env: Sequence[tuple[str, str]], extra_env: Mapping[str, str]
) -> tuple[tuple[str, str], ...]:
    merged = dict(env)
    merged.update(extra_env)
    return tuple(merged.items())


def _notes(
    topo: CpuTopology,
    layout: _Layout,
    *,
    ppn: int | None,
    threads: int | None,
    omp: int,
    ipex: bool,
) -> tuple[str, ...]:
    ranks = len(layout.compute)
    notes = [_ranks_note(topo, ranks, ppn), _threads_note(layout, threads, omp)]
    idle = topo.usable_physical_cores - ranks * layout.cores_per_rank
    if idle:
        notes.append(f"{idle} core(s)/node left idle: {topo.usable_physical_cores} cores do not "
                     f"split evenly into {ranks} ranks")
    if topo.restricted:
        notes.append(f"node is confined to {topo.usable_cpus} of {topo.logical_cpus} CPUs: "
                     "Intel MPI pinning is off and ranks inherit that affinity")
    if not topo.tcmalloc:
        notes.append("libtcmalloc.so.4 not found: LD_PRELOAD has no tcmalloc "
                     "(install libgoogle-perftools4 for faster allocation)")
    notes.extend(_precision_notes(topo, ipex))
    return tuple(notes)


def _ranks_note(topo: CpuTopology, ranks: int, ppn: int | None) -> str:
    if ppn is not None:
        return f"{ranks} rank(s)/node: set by --ppn"
    if ranks == topo.sockets:
        return f"{ranks} rank(s)/node: one per socket"
    return f"{ranks} rank(s)/node: only {topo.usable_physical_cores} usable core(s)"


def _threads_note(layout: _Layout, threads: int | None, omp: int) -> str:
    if threads is not None:
        over = " (more threads than cores: oversubscribed)" if omp > layout.cores_per_rank else ""
        return f"{omp} OpenMP thread(s)/rank: set by --threads{over}"
    if layout.reserved:
        return (f"{omp} OpenMP thread(s)/rank: {layout.cores_per_rank} cores per rank minus "
                f"{layout.reserved} reserved for CCL worker(s)")
    shared = " (CCL worker shares it)" if layout.workers[0] else ""
    return f"{omp} OpenMP thread(s)/rank: one per physical core{shared}"


def _precision_notes(topo: CpuTopology, ipex: bool) -> list[str]:
    if topo.has_amx:
        return ["AMX present: bf16 runs on AMX tiles"]
    if topo.has_native_bf16:
        return ["AVX512_BF16 present (no AMX): bf16 is native but slower than on AMX"]
    if ipex and not topo.has_avx512:
        return ["AVX2-only CPU: IPEX bf16 is documented as unreliable here; train in fp32"]
    return ["no AMX or AVX512_BF16: bf16 is emulated and slow; prefer fp32"]

