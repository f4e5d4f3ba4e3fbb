"""The CPU probe: a POSIX sh script run on a node, and its output parsed into a CpuTopology."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

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

