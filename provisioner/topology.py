"""CPU topology of a node -> ranks per node, OpenMP/CCL/Intel MPI environment, mpiexec argv.

Pure functions over frozen dataclasses: `train --dry-run` builds the same plan from a catalog
entry that a real run builds from a probed node, and tests assert on it without any machine.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

BACKENDS = ("gloo", "ccl")
MASTER_PORT = "29500"
_INT_FIELDS = ("sockets", "cores_per_socket", "threads_per_core", "numa_nodes", "usable_cpus")
_KEY_LINE = re.compile(r"^([a-z_]+)=(.*)$")


@dataclass(frozen=True)
class CpuTopology:
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    numa_nodes: int
    usable_cpus: int
    flags: frozenset[str] = frozenset()
    tcmalloc: str | None = None
    iomp: str | None = None

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"CpuTopology.{name} must be a positive integer, got {value!r}")
        object.__setattr__(self, "flags", frozenset(self.flags))

    @property
    def physical_cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def logical_cpus(self) -> int:
        return self.physical_cores * self.threads_per_core

    @property
    def usable_physical_cores(self) -> int:
        return max(1, min(self.physical_cores, self.usable_cpus // self.threads_per_core))

    @property
    def restricted(self) -> bool:
        """True when an affinity mask (taskset, cpuset) hides some of the node's CPUs."""
        return self.usable_cpus < self.logical_cpus

    @property
    def has_amx(self) -> bool:
        return bool({"amx_tile", "amx_bf16"} & self.flags)

    @property
    def has_native_bf16(self) -> bool:
        return bool({"amx_bf16", "avx512_bf16"} & self.flags)

    @property
    def has_avx512(self) -> bool:
        return "avx512f" in self.flags

    def describe(self) -> str:
        return (
            f"{self.sockets} socket(s) x {self.cores_per_socket} cores x "
            f"{self.threads_per_core} thread(s), {self.usable_cpus} usable CPU(s)"
        )


# POSIX sh (dash on Debian 12 / Ubuntu 24.04). Venv path: $1, else $XC_VENV.
# LC_ALL=C because lscpu translates its labels. ldconfig is tried by absolute path too because
# Debian leaves /sbin out of a normal user's PATH.
PROBE_SCRIPT = r"""
LC_ALL=C; export LC_ALL
venv=${1:-${XC_VENV:-}}
is_num() { case $1 in ''|*[!0-9]*) return 1;; esac; [ "$1" -gt 0 ]; }
cpuinfo() { sed -n "s/^$1[[:space:]]*:[[:space:]]*//p" /proc/cpuinfo | head -n 1; }
lscpu_out=$(lscpu 2>/dev/null) || lscpu_out=
lscpu_field() { printf '%s\n' "$lscpu_out" | sed -n "s/^$1:[[:space:]]*//p" | head -n 1; }
sockets=$(lscpu_field 'Socket(s)')
cores=$(lscpu_field 'Core(s) per socket')
threads=$(lscpu_field 'Thread(s) per core')
numa=$(lscpu_field 'NUMA node(s)')
total=$(grep -c '^processor' /proc/cpuinfo)
is_num "$sockets" || sockets=$(( $(grep '^physical id' /proc/cpuinfo | sort -u | wc -l) ))
is_num "$sockets" || sockets=1
is_num "$cores" || cores=$(cpuinfo 'cpu cores')
is_num "$cores" || cores=$(( total / sockets ))
is_num "$cores" || cores=1
if ! is_num "$threads"; then
  siblings=$(cpuinfo siblings)
  if is_num "$siblings"; then threads=$(( siblings / cores )); fi
  is_num "$threads" || threads=1
fi
is_num "$numa" || numa=$(( $(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l) ))
is_num "$numa" || numa=1
usable=$(nproc 2>/dev/null) || usable=$(getconf _NPROCESSORS_ONLN)
ldconfig_find() {
  for lc in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
    if out=$("$lc" -p 2>/dev/null); then
      printf '%s\n' "$out" | sed -n "s/^[[:space:]]*$1 ([^)]*x86-64[^)]*) => //p" | head -n 1
      return 0
    fi
  done
}
tcmalloc=
for p in /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /usr/lib64/libtcmalloc.so.4; do
  if [ -e "$p" ]; then tcmalloc=$p; break; fi
done
[ -n "$tcmalloc" ] || tcmalloc=$(ldconfig_find libtcmalloc.so.4)
iomp=
if [ -n "$venv" ] && [ -e "$venv/lib/libiomp5.so" ]; then iomp=$venv/lib/libiomp5.so; fi
[ -n "$iomp" ] || iomp=$(ldconfig_find libiomp5.so)
printf 'sockets=%s\n' "$sockets"
printf 'cores_per_socket=%s\n' "$cores"
printf 'threads_per_core=%s\n' "$threads"
printf 'numa_nodes=%s\n' "$numa"
printf 'usable_cpus=%s\n' "$usable"
printf 'flags=%s\n' "$(cpuinfo flags)"
printf 'tcmalloc=%s\n' "$tcmalloc"
printf 'iomp=%s\n' "$iomp"
"""


def probe_command(venv: str | None = None) -> str:
    """A shell command line that runs PROBE_SCRIPT on a node (e.g. through ssh)."""
    args = ["sh", "-c", PROBE_SCRIPT, "sh"] + ([venv] if venv else [])
    return shlex.join(args)


def parse_probe(text: str) -> CpuTopology:
    values = _key_values(text)
    missing = [key for key in (*_INT_FIELDS, "flags") if key not in values]
    if missing:
        raise ValueError(
            f"CPU probe output is missing {', '.join(missing)}; got: {_preview(text)!r}"
        )
    return CpuTopology(
        **{key: _positive_int(key, values[key]) for key in _INT_FIELDS},
        flags=frozenset(values["flags"].split()),
        tcmalloc=_library_path("tcmalloc", values.get("tcmalloc", "")),
        iomp=_library_path("iomp", values.get("iomp", "")),
    )


def _key_values(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _KEY_LINE.match(line.strip())
        # First occurrence wins; lines that are not key=value (a login banner) are skipped.
        if match and match.group(1) not in values:
            values[match.group(1)] = match.group(2).strip()
    return values


def _positive_int(key: str, raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"CPU probe: {key}={raw!r} is not a positive integer")
    return int(raw)


def _library_path(key: str, raw: str) -> str | None:
    if raw and not raw.startswith("/"):
        raise ValueError(f"CPU probe: {key}={raw!r} is not an absolute path")
    return raw or None


def _preview(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


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
