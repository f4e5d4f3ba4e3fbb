"""Choose bf16 or fp32 from what the CPU supports natively."""

from __future__ import annotations

from pathlib import Path

PRECISIONS = ("auto", "bf16", "fp32")
_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def cpu_flags_text(path: Path = Path("/proc/cpuinfo")) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def has_native_bf16(cpuinfo: str) -> bool:
    """True when the CPU flags list AMX-BF16 or AVX512-BF16.

    Accepts all of /proc/cpuinfo or just a bare flags string.
    """
    flag_lines = [
        line.partition(":")[2]
        for line in cpuinfo.splitlines()
        if line.partition(":")[0].strip() == "flags"
    ]
    words = " ".join(flag_lines).split() if flag_lines else cpuinfo.split()
    return bool(_BF16_FLAGS & set(words))


def resolve_precision(requested: str, cpuinfo: str) -> str:
    """`auto` becomes bf16 only on CPUs with native bf16; explicit choices are kept."""
    if requested not in PRECISIONS:
        raise ValueError(f"unknown precision {requested!r}")
    if requested != "auto":
        return requested
    return "bf16" if has_native_bf16(cpuinfo) else "fp32"
