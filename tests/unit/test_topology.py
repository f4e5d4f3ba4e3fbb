import os
import shutil
import subprocess
from pathlib import Path

import pytest

from xeoncluster.topology import (
    PROBE_SCRIPT,
    CpuTopology,
    RankPlan,
    mpirun_command,
    parse_probe,
    plan_ranks,
    probe_command,
    render_command,
)

TC = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"
IOMP = "/opt/xc/venv/lib/libiomp5.so"
ICX = frozenset({"avx2", "avx512f", "avx512_vnni"})
SPR = ICX | {"avx512_bf16", "amx_bf16", "amx_tile"}

C6I = CpuTopology(1, 32, 2, 1, 64, ICX, TC, None)           # c6i.16xlarge
C7I = CpuTopology(2, 48, 2, 2, 192, SPR, TC, None)          # c7i.48xlarge
LOCAL = CpuTopology(1, 2, 1, 1, 2, frozenset({"avx2"}), TC, None)
PINNED = CpuTopology(1, 2, 1, 1, 1, frozenset({"avx2"}), TC, None)   # taskset -c 1


def with_iomp(topo: CpuTopology) -> CpuTopology:
    return CpuTopology(topo.sockets, topo.cores_per_socket, topo.threads_per_core,
                       topo.numa_nodes, topo.usable_cpus, topo.flags, topo.tcmalloc, IOMP)


def plan(topo, backend="gloo", nodes=1, **kw) -> RankPlan:
    return plan_ranks(topo, nodes, backend=backend, ipex=backend == "ccl",
                      master_addr="10.0.0.10", **kw)


# --- CpuTopology -------------------------------------------------------------------------------

def test_derived_properties():
    assert C7I.physical_cores == 96 and C7I.usable_physical_cores == 96
    assert C7I.has_amx and C7I.has_native_bf16
    assert not C6I.has_amx and not C6I.has_native_bf16
    assert PINNED.usable_physical_cores == 1 and PINNED.restricted
    assert not LOCAL.restricted


def test_pinned_hyperthreaded_node_still_has_one_core():
    topo = CpuTopology(1, 32, 2, 1, 1)
    assert topo.usable_physical_cores == 1


def test_topology_rejects_nonpositive_counts():
    with pytest.raises(ValueError, match="sockets must be a positive integer"):
        CpuTopology(0, 2, 1, 1, 2)


# --- plans for the node shapes ----------------------------------------------------------------

def test_c6i_gloo_one_rank_per_socket():
    p = plan(C6I)
    assert p.ranks_per_node == 1 and p.threads_per_rank == 32
    assert p.env == (
        ("MASTER_ADDR", "10.0.0.10"), ("MASTER_PORT", "29500"), ("OMP_NUM_THREADS", "32"),
        ("OMP_PROC_BIND", "close"), ("OMP_PLACES", "cores"),
        ("I_MPI_PIN_DOMAIN", "socket"), ("LD_PRELOAD", TC),
    )
    assert "1 rank(s)/node: one per socket" in p.notes


def test_c6i_ccl_reserves_last_core_for_worker():
    env = plan(with_iomp(C6I), "ccl").env_dict()
    assert env["OMP_NUM_THREADS"] == "31"
    assert env["I_MPI_PIN_DOMAIN"] == "[0x7fffffff]"
    assert env["CCL_WORKER_COUNT"] == "1"
    assert env["CCL_WORKER_AFFINITY"] == "31"
    assert env["KMP_AFFINITY"] == "granularity=fine,compact,1,0"
    assert env["KMP_BLOCKTIME"] == "1"
    assert env["LD_PRELOAD"] == f"{TC}:{IOMP}"
    assert "OMP_PROC_BIND" not in env


def test_c7i_gloo_two_sockets():
    p = plan(C7I)
    env = p.env_dict()
    assert p.ranks_per_node == 2
    assert env["OMP_NUM_THREADS"] == "48"
    assert env["I_MPI_PIN_DOMAIN"] == "socket"
    assert "CCL_WORKER_COUNT" not in env and "KMP_AFFINITY" not in env


def test_c7i_ccl_masks_exclude_worker_cores():
    env = plan(with_iomp(C7I), "ccl").env_dict()
    assert env["OMP_NUM_THREADS"] == "47"
    assert env["I_MPI_PIN_DOMAIN"] == "[0x7fffffffffff,0x7fffffffffff000000000000]"
    assert env["CCL_WORKER_AFFINITY"] == "47,95"


def test_local_two_core_node():
    gloo = plan(LOCAL).env_dict()
    assert gloo == {
        "MASTER_ADDR": "10.0.0.10", "MASTER_PORT": "29500", "OMP_NUM_THREADS": "2",
        "OMP_PROC_BIND": "close", "OMP_PLACES": "cores", "I_MPI_PIN_DOMAIN": "socket",
        "LD_PRELOAD": TC,
    }
    ccl = plan(LOCAL, "ccl").env_dict()
    assert ccl["OMP_NUM_THREADS"] == "1"
    assert ccl["I_MPI_PIN_DOMAIN"] == "[0x1]"
    assert ccl["CCL_WORKER_AFFINITY"] == "1"


def test_node_pinned_to_one_cpu():
    p = plan(PINNED, "ccl")
    env = p.env_dict()
    assert p.ranks_per_node == 1 and env["OMP_NUM_THREADS"] == "1"
    assert env["I_MPI_PIN"] == "off"
    assert "I_MPI_PIN_DOMAIN" not in env and "CCL_WORKER_AFFINITY" not in env
    assert env["CCL_WORKER_COUNT"] == "1"
    assert any("confined to 1 of 2 CPUs" in note for note in p.notes)
    assert plan(PINNED).env_dict()["OMP_NUM_THREADS"] == "1"


def test_missing_tcmalloc_is_noted():
    topo = CpuTopology(1, 2, 1, 1, 2, frozenset(), None, None)
    p = plan(topo)
    assert "LD_PRELOAD" not in p.env_dict()
    assert any("libtcmalloc.so.4 not found" in note for note in p.notes)


def test_iomp_without_tcmalloc_is_still_preloaded():
    topo = CpuTopology(1, 2, 1, 1, 2, frozenset(), None, IOMP)
    assert plan(topo).env_dict()["LD_PRELOAD"] == IOMP


def test_ipex_on_avx2_only_cpu_warns():
    assert any("AVX2-only" in note for note in plan(LOCAL, "ccl").notes)


# --- overrides ----------------------------------------------------------------------------------

def test_ppn_override_splits_socket_into_masks():
    p = plan(C6I, ppn=2)
    env = p.env_dict()
    assert p.ranks_per_node == 2 and env["OMP_NUM_THREADS"] == "16"
    assert env["I_MPI_PIN_DOMAIN"] == "[0xffff,0xffff0000]"
    assert "2 rank(s)/node: set by --ppn" in p.notes


def test_ppn_with_ccl_four_ranks_on_two_sockets():
    env = plan(C7I, "ccl", ppn=4).env_dict()
    assert env["OMP_NUM_THREADS"] == "23"
    assert env["CCL_WORKER_AFFINITY"] == "23,47,71,95"
    masks = [int(m, 16) for m in env["I_MPI_PIN_DOMAIN"].strip("[]").split(",")]
    assert masks == [((1 << 23) - 1) << (24 * r) for r in range(4)]


def test_uneven_split_leaves_cores_idle():
    p = plan(C6I, ppn=3)
    assert p.threads_per_rank == 10
    assert any("2 core(s)/node left idle" in note for note in p.notes)


def test_threads_override():
    p = plan(C7I, "ccl", threads=8)
    assert p.threads_per_rank == 8 and p.env_dict()["OMP_NUM_THREADS"] == "8"
    assert p.env_dict()["CCL_WORKER_AFFINITY"] == "47,95"


def test_extra_env_overrides_computed_values_and_keeps_order():
    p = plan(C6I, extra_env={"OMP_NUM_THREADS": "4", "FI_PROVIDER": "tcp"})
    keys = [k for k, _ in p.env]
    assert keys[2] == "OMP_NUM_THREADS" and keys[-1] == "FI_PROVIDER"
    assert p.env_dict()["OMP_NUM_THREADS"] == "4"


def test_extra_ccl_worker_count_reserves_that_many_cores():
    env = plan(C7I, "ccl", extra_env={"CCL_WORKER_COUNT": "2"}).env_dict()
    assert env["OMP_NUM_THREADS"] == "46"
    assert env["CCL_WORKER_COUNT"] == "2"
    assert env["CCL_WORKER_AFFINITY"] == "46,47,94,95"


@pytest.mark.parametrize("ppn, message", [
    (0, "ppn must be at least 1, got 0"),
    (3, r"ppn=3 is more than the 2 usable physical core\(s\) per node .*--ppn 2 or fewer"),
])
def test_invalid_ppn(ppn, message):
    with pytest.raises(ValueError, match=message):
        plan(LOCAL, ppn=ppn)


def test_ppn_on_pinned_node_counts_usable_cores():
    with pytest.raises(ValueError, match="more than the 1 usable"):
        plan(PINNED, ppn=2)


@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "nccl"}, "backend must be one of gloo, ccl"),
    ({"threads": 0}, "threads must be at least 1"),
    ({"nodes": 0}, "nodes must be at least 1"),
    ({"extra_env": {"CCL_WORKER_COUNT": "x"}, "backend": "ccl"}, "CCL_WORKER_COUNT"),
])
def test_invalid_inputs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan(C6I, **kwargs)


# --- command line -------------------------------------------------------------------------------

MPIEXEC = "/opt/xc/venv/bin/mpiexec.hydra"
PROGRAM = ["/opt/xc/venv/bin/python", "-m", "xeoncluster.node", "squad"]


def test_argv_four_nodes_stock_stack():
    p = plan(C7I, "gloo", nodes=4)
    assert p.world_size == 8
    assert mpirun_command(MPIEXEC, "/home/ubuntu/hosts", p, PROGRAM) == [
        MPIEXEC, "-f", "/home/ubuntu/hosts", "-n", "8", "-ppn", "2",
        "-genv", "MASTER_ADDR", "10.0.0.10",
        "-genv", "MASTER_PORT", "29500",
        "-genv", "OMP_NUM_THREADS", "48",
        "-genv", "OMP_PROC_BIND", "close",
        "-genv", "OMP_PLACES", "cores",
        "-genv", "I_MPI_PIN_DOMAIN", "socket",
        "-genv", "LD_PRELOAD", TC,
        *PROGRAM,
    ]


def test_argv_four_nodes_intel_stack():
    p = plan(with_iomp(C7I), "ccl", nodes=4)
    assert mpirun_command(MPIEXEC, "/home/ubuntu/hosts", p, PROGRAM) == [
        MPIEXEC, "-f", "/home/ubuntu/hosts", "-n", "8", "-ppn", "2",
        "-genv", "MASTER_ADDR", "10.0.0.10",
        "-genv", "MASTER_PORT", "29500",
        "-genv", "OMP_NUM_THREADS", "47",
        "-genv", "KMP_AFFINITY", "granularity=fine,compact,1,0",
        "-genv", "KMP_BLOCKTIME", "1",
        "-genv", "I_MPI_PIN_DOMAIN", "[0x7fffffffffff,0x7fffffffffff000000000000]",
        "-genv", "CCL_WORKER_COUNT", "1",
        "-genv", "CCL_WORKER_AFFINITY", "47,95",
        "-genv", "LD_PRELOAD", f"{TC}:{IOMP}",
        *PROGRAM,
    ]


def test_mpirun_needs_a_program():
    with pytest.raises(ValueError, match="program"):
        mpirun_command(MPIEXEC, "hosts", plan(LOCAL), [])


def test_render_command_quotes_for_the_shell():
    argv = mpirun_command(MPIEXEC, "hosts", plan(LOCAL, "ccl"), ["python", "-c", "print('hi')"])
    line = render_command(argv)
    assert "-genv I_MPI_PIN_DOMAIN '[0x1]'" in line
    assert line.endswith("python -c 'print('\"'\"'hi'\"'\"')'")
    assert subprocess.run(["sh", "-c", f"printf '%s\\n' {line}"], capture_output=True,
                          text=True).stdout.splitlines() == argv


# --- probe --------------------------------------------------------------------------------------

def run_probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", PROBE_SCRIPT, "sh", *args], capture_output=True,
                          text=True, env=env, timeout=30, check=True)


def test_probe_runs_here_and_parses():
    topo = parse_probe(run_probe().stdout)
    assert topo.usable_cpus == len(os.sched_getaffinity(0))
    assert topo.logical_cpus >= topo.usable_cpus
    assert topo.numa_nodes >= 1 and topo.flags
    if Path(TC).exists():
        assert topo.tcmalloc == TC


def test_probe_through_probe_command():
    out = subprocess.run(probe_command("/nonexistent venv"), shell=True, capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert parse_probe(out).usable_cpus >= 1


def test_probe_sees_affinity():
    if not shutil.which("taskset"):
        pytest.skip("taskset not installed")
    cpu = str(min(os.sched_getaffinity(0)))
    out = subprocess.run(["taskset", "-c", cpu, "sh", "-c", PROBE_SCRIPT], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert parse_probe(out).usable_cpus == 1


def test_probe_finds_iomp_in_venv(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libiomp5.so").touch()
    assert parse_probe(run_probe(str(tmp_path)).stdout).iomp == f"{tmp_path}/lib/libiomp5.so"
    env = {**os.environ, "XC_VENV": str(tmp_path)}
    assert parse_probe(run_probe(env=env).stdout).iomp == f"{tmp_path}/lib/libiomp5.so"


def _bin_without_lscpu(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("sed", "head", "grep", "sort", "wc", "ls", "nproc", "getconf"):
        found = shutil.which(tool)
        if found:
            (bindir / tool).symlink_to(found)
    # A stand-in ldconfig, found first on PATH, that knows a system-wide libiomp5.so.
    (bindir / "ldconfig").write_text(
        "#!/bin/sh\nprintf '\\tlibiomp5.so (libc6,x86-64) => /opt/intel/lib/libiomp5.so\\n'\n")
    (bindir / "ldconfig").chmod(0o755)
    return bindir


def test_probe_falls_back_without_lscpu(tmp_path):
    with_lscpu = parse_probe(run_probe().stdout)
    env = {"PATH": str(_bin_without_lscpu(tmp_path))}
    without = parse_probe(run_probe(env=env).stdout)
    assert (without.sockets, without.cores_per_socket, without.threads_per_core,
            without.numa_nodes, without.usable_cpus) == (
        with_lscpu.sockets, with_lscpu.cores_per_socket, with_lscpu.threads_per_core,
        with_lscpu.numa_nodes, with_lscpu.usable_cpus)
    assert without.iomp == "/opt/intel/lib/libiomp5.so"


C7I_SAMPLE = """\
sockets=2
cores_per_socket=48
threads_per_core=2
numa_nodes=2
usable_cpus=192
flags=fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4
iomp=/opt/xc/venv/lib/libiomp5.so
"""

# What the fallback path printed on a 2-vCPU Debian 12 KVM guest with lscpu off PATH (flags cut).
NO_LSCPU_SAMPLE = """\
sockets=1
cores_per_socket=2
threads_per_core=1
numa_nodes=1
usable_cpus=2
flags=fpu vme avx2
tcmalloc=
iomp=
"""


def test_parse_c7i_sample():
    topo = parse_probe(C7I_SAMPLE)
    assert topo == CpuTopology(2, 48, 2, 2, 192,
                               frozenset({"fpu", "avx2", "avx512f", "avx512_bf16", "amx_bf16",
                                          "amx_tile"}), TC, IOMP)


def test_parse_fallback_sample_without_libraries():
    topo = parse_probe(NO_LSCPU_SAMPLE)
    assert (topo.sockets, topo.physical_cores, topo.usable_cpus) == (1, 2, 2)
    assert topo.tcmalloc is None and topo.iomp is None


def test_parse_skips_banner_lines():
    topo = parse_probe("Welcome to Ubuntu 24.04 LTS\n\n" + C7I_SAMPLE)
    assert topo.sockets == 2


@pytest.mark.parametrize("text, message", [
    ("", "missing sockets, cores_per_socket"),
    ("bash: lscpu: command not found\n", "missing sockets"),
    (C7I_SAMPLE.replace("sockets=2", "sockets=-"), "sockets='-' is not a positive integer"),
    (C7I_SAMPLE.replace("usable_cpus=192", "usable_cpus=0"), "usable_cpus='0'"),
    (C7I_SAMPLE.replace("tcmalloc=/usr", "tcmalloc=usr"), "tcmalloc='usr.*absolute path"),
])
def test_parse_rejects_garbage(text, message):
    with pytest.raises(ValueError, match=message):
        parse_probe(text)
