import pytest

from xeoncluster.providers.aws.catalog import DEFAULT_TCMALLOC, known_names, lookup, nearest, topology_of
from xeoncluster.topology import plan_ranks

REQUIRED = (
    [f"c6i.{s}" for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge", "32xlarge")]
    + [f"c7i.{s}" for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge", "24xlarge",
                            "48xlarge", "metal-48xl")]
    + [f"m7i.{s}" for s in ("2xlarge", "8xlarge", "16xlarge", "48xlarge")]
    + [f"r7i.{s}" for s in ("2xlarge", "16xlarge", "48xlarge")]
    + [f"r7iz.{s}" for s in ("2xlarge", "16xlarge", "32xlarge", "metal-16xl", "metal-32xl")]
)


def test_table_covers_required_types():
    assert set(REQUIRED) <= set(known_names())


@pytest.mark.parametrize("name", REQUIRED)
def test_entries_are_consistent(name):
    it = lookup(name)
    assert it.vcpus == 2 * it.cores and it.threads_per_core == 2
    assert it.cores % it.sockets == 0
    assert it.on_demand_usd_per_hour > 0 and it.memory_gib > 0
    assert it.amx == it.avx512_bf16 == (it.generation == "Sapphire Rapids")


@pytest.mark.parametrize("name, vcpus, cores, sockets", [
    ("c6i.16xlarge", 64, 32, 1),
    ("c6i.32xlarge", 128, 64, 2),
    ("c7i.48xlarge", 192, 96, 2),
    ("c7i.metal-48xl", 192, 96, 2),
    ("c7i.24xlarge", 96, 48, 1),
    ("r7iz.16xlarge", 64, 32, 1),
    ("r7iz.metal-16xl", 64, 32, 1),
    ("r7iz.metal-32xl", 128, 64, 2),
    ("m7i.48xlarge", 192, 96, 2),
])
def test_facts(name, vcpus, cores, sockets):
    it = lookup(name)
    assert (it.vcpus, it.cores, it.sockets) == (vcpus, cores, sockets)


def test_generations():
    assert lookup("c6i.16xlarge").generation == "Ice Lake"
    assert not lookup("c6i.16xlarge").amx and not lookup("c6i.16xlarge").avx512_bf16
    assert lookup("r7iz.2xlarge").amx


def test_lookup_unknown_and_case():
    assert lookup("c7i.huge") is None
    assert lookup(" C7I.48XLARGE ").name == "c7i.48xlarge"


@pytest.mark.parametrize("typo, suggestion", [
    ("c7i.48xlrage", "c7i.48xlarge"),
    ("c7.48xlarge", "c7i.48xlarge"),
    ("r7iz.metal16xl", "r7iz.metal-16xl"),
    ("c6i.16xl", "c6i.16xlarge"),
])
def test_nearest(typo, suggestion):
    assert nearest(typo) == suggestion


def test_nearest_gives_up_on_nonsense():
    assert nearest("t2.micro-banana-split") is None


def test_topology_of_sapphire_rapids():
    topo = topology_of(lookup("c7i.48xlarge"))
    assert (topo.sockets, topo.cores_per_socket, topo.threads_per_core) == (2, 48, 2)
    assert (topo.numa_nodes, topo.usable_cpus) == (2, 192)
    assert {"amx_bf16", "amx_tile", "avx512_bf16", "avx512f"} <= topo.flags
    assert topo.has_amx and topo.has_native_bf16
    assert topo.tcmalloc == DEFAULT_TCMALLOC and topo.iomp is None


def test_topology_of_ice_lake():
    topo = topology_of(lookup("c6i.16xlarge"), tcmalloc=None, iomp="/v/lib/libiomp5.so")
    assert (topo.sockets, topo.physical_cores, topo.usable_cpus) == (1, 32, 64)
    assert "avx512f" in topo.flags and not topo.has_native_bf16 and not topo.has_amx
    assert topo.tcmalloc is None and topo.iomp == "/v/lib/libiomp5.so"


def test_dry_run_plan_from_catalog():
    topo = topology_of(lookup("c7i.48xlarge"))
    plan = plan_ranks(topo, 4, backend="gloo", ipex=False, master_addr="10.0.0.10")
    assert (plan.world_size, plan.ranks_per_node, plan.threads_per_rank) == (8, 2, 48)
    assert plan.env_dict()["I_MPI_PIN_DOMAIN"] == "socket"
