"""Facts about the EC2 instance types the product plans for: cores, sockets, AMX/bf16, price.

Lets `plan` and `train --dry-run` size a cluster that does not exist yet; a real run probes the
nodes instead (topology.PROBE_SCRIPT).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from types import MappingProxyType

from xeoncluster.topology import CpuTopology

DEFAULT_TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"

_BASE_FLAGS = ("avx", "avx2", "fma", "f16c", "sse4_2")
_ICE_LAKE_FLAGS = (*_BASE_FLAGS, "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl",
                   "avx512_vnni", "avx512ifma", "avx512vbmi")
_SAPPHIRE_RAPIDS_FLAGS = (*_ICE_LAKE_FLAGS, "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile",
                          "amx_int8")


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    cores: int
    sockets: int
    threads_per_core: int
    memory_gib: int
    amx: bool
    avx512_bf16: bool
    generation: str
    on_demand_usd_per_hour: float

    @property
    def cores_per_socket(self) -> int:
        return self.cores // self.sockets


def _ice_lake(name: str, cores: int, sockets: int, memory_gib: int, usd: float) -> InstanceType:
    return InstanceType(name, 2 * cores, cores, sockets, 2, memory_gib, False, False, "Ice Lake",
                        usd)


def _sapphire_rapids(
    name: str, cores: int, sockets: int, memory_gib: int, usd: float
) -> InstanceType:
    return InstanceType(name, 2 * cores, cores, sockets, 2, memory_gib, True, True,
                        "Sapphire Rapids", usd)


# Sockets: AWS does not publish them. A size that is the whole host (the largest size and its
# metal twin) spans both sockets of a 2-socket host: c7i/m7i/r7i 48xlarge = 2 x 48-core Xeon 8488C,
# c6i.32xlarge = 2 x 32-core Xeon 8375C, r7iz 32xlarge/metal-32xl = 2 x 32-core Xeon 6455B.
# Every smaller size fits inside one socket, and the hypervisor presents it as one.
#
# Prices: approximate public on-demand list prices (Linux, us-east-1, USD/hour), used for
# estimates only when the Pricing API is unavailable (moto has none). Not a quote.
_TABLE: tuple[InstanceType, ...] = (
    _ice_lake("c6i.xlarge", 2, 1, 8, 0.17),
    _ice_lake("c6i.2xlarge", 4, 1, 16, 0.34),
    _ice_lake("c6i.4xlarge", 8, 1, 32, 0.68),
    _ice_lake("c6i.8xlarge", 16, 1, 64, 1.36),
    _ice_lake("c6i.16xlarge", 32, 1, 128, 2.72),
    _ice_lake("c6i.32xlarge", 64, 2, 256, 5.44),
    _sapphire_rapids("c7i.xlarge", 2, 1, 8, 0.1785),
    _sapphire_rapids("c7i.2xlarge", 4, 1, 16, 0.357),
    _sapphire_rapids("c7i.4xlarge", 8, 1, 32, 0.714),
    _sapphire_rapids("c7i.8xlarge", 16, 1, 64, 1.428),
    _sapphire_rapids("c7i.16xlarge", 32, 1, 128, 2.856),
    _sapphire_rapids("c7i.24xlarge", 48, 1, 192, 4.284),
    _sapphire_rapids("c7i.48xlarge", 96, 2, 384, 8.568),
    _sapphire_rapids("c7i.metal-48xl", 96, 2, 384, 8.568),
    _sapphire_rapids("m7i.2xlarge", 4, 1, 32, 0.4032),
    _sapphire_rapids("m7i.8xlarge", 16, 1, 128, 1.6128),
    _sapphire_rapids("m7i.16xlarge", 32, 1, 256, 3.2256),
    _sapphire_rapids("m7i.48xlarge", 96, 2, 768, 9.6768),
    _sapphire_rapids("r7i.2xlarge", 4, 1, 64, 0.5292),
    _sapphire_rapids("r7i.16xlarge", 32, 1, 512, 4.2336),
    _sapphire_rapids("r7i.48xlarge", 96, 2, 1536, 12.7008),
    _sapphire_rapids("r7iz.2xlarge", 4, 1, 64, 0.744),
    _sapphire_rapids("r7iz.16xlarge", 32, 1, 512, 5.952),
    _sapphire_rapids("r7iz.32xlarge", 64, 2, 1024, 11.904),
    _sapphire_rapids("r7iz.metal-16xl", 32, 1, 512, 5.952),
    _sapphire_rapids("r7iz.metal-32xl", 64, 2, 1024, 11.904),
)
_BY_NAME = MappingProxyType({it.name: it for it in _TABLE})


def lookup(name: str) -> InstanceType | None:
    return _BY_NAME.get(name.strip().lower())


def known_names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def nearest(name: str) -> str | None:
    """The known name closest to `name`, for a "did you mean" hint; None if nothing is close."""
    matches = difflib.get_close_matches(name.strip().lower(), known_names(), n=1, cutoff=0.6)
    return matches[0] if matches else None


def topology_of(
    it: InstanceType, tcmalloc: str | None = DEFAULT_TCMALLOC, iomp: str | None = None
) -> CpuTopology:
    """The topology a fresh node of this type would report, for planning before launch."""
    return CpuTopology(
        sockets=it.sockets,
        cores_per_socket=it.cores_per_socket,
        threads_per_core=it.threads_per_core,
        # AWS presents one NUMA node per socket (no sub-NUMA clustering) on these sizes.
        numa_nodes=it.sockets,
        usable_cpus=it.vcpus,
        flags=_flags(it),
        tcmalloc=tcmalloc,
        iomp=iomp,
    )


def _flags(it: InstanceType) -> frozenset[str]:
    if it.amx:
        return frozenset(_SAPPHIRE_RAPIDS_FLAGS)
    if it.avx512_bf16:
        return frozenset((*_ICE_LAKE_FLAGS, "avx512_bf16"))
    return frozenset(_ICE_LAKE_FLAGS)
