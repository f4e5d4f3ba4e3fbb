"""Check that the software stack, DDP backend and precision fit together, before anything runs."""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass

from xeoncluster.node import stack_rules

STACKS = ("stock", "intel")
BACKENDS = ("auto", *stack_rules.BACKENDS)


@dataclass(frozen=True)
class Versions:
    """What is installed; ``None`` means not importable."""

    torch: str
    transformers: str
    ipex: str | None = None
    oneccl: str | None = None


@dataclass(frozen=True)
class StackPlan:
    stack: str
    backend: str | None  # None: single process, no process group backend
    use_ipex: bool
    warnings: tuple[str, ...] = ()


class StackError(ValueError):
    pass


def _default_backend(stack: str) -> str:
    return "ccl" if stack == "intel" else "gloo"


def _check_intel(versions: Versions) -> None:
    if versions.ipex is None:
        raise StackError(
            "stack 'intel' needs intel_extension_for_pytorch, which is not importable; "
            "install the intel stack from xeoncluster/ami/stacks.yaml or use --stack stock"
        )
    if versions.oneccl is None:
        raise StackError(
            "stack 'intel' needs oneccl_bindings_for_pytorch (oneccl_bind_pt), which is not "
            "importable; install the intel stack from xeoncluster/ami/stacks.yaml or use --stack stock"
        )
    if not stack_rules.built_for_torch(versions.ipex, versions.torch):
        raise StackError(
            f"stack 'intel': IPEX {versions.ipex} does not match torch {versions.torch} "
            "(IPEX must match torch major.minor)"
        )


def _check_ccl_support(versions: Versions) -> None:
    if not stack_rules.accepts_ccl(versions.transformers):
        raise StackError(
            f"ddp backend 'ccl' needs transformers <= 5.0.0, but {versions.transformers} is "
            "installed (ccl support was removed); use the intel stack's pins or --stack stock"
        )


def plan_stack(
    stack: str,
    backend: str,
    precision: str,
    native_bf16: bool,
    world_size: int,
    versions: Versions,
) -> StackPlan:
    """Validate the combination; raise StackError with a one-line reason, else return the plan."""
    if stack not in STACKS:
        raise StackError(f"unknown stack {stack!r}; choose one of {', '.join(STACKS)}")
    if backend not in BACKENDS:
        raise StackError(f"unknown ddp backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    chosen = _default_backend(stack) if backend == "auto" else backend
    if chosen == "ccl" and not stack_rules.ccl_allowed(_default_backend(stack)):
        raise StackError("ddp backend 'ccl' needs --stack intel; the stock stack uses gloo")
    if stack == "intel":
        _check_intel(versions)
    if chosen == "ccl":
        _check_ccl_support(versions)
    warnings: list[str] = []
    if precision == "bf16" and not native_bf16:
        warnings.append(
            "bf16 requested but this CPU has no native bf16 (amx_bf16/avx512_bf16); "
            "it will be emulated and slow"
        )
    return StackPlan(
        stack=stack,
        backend=chosen if world_size > 1 else None,
        use_ipex=stack == "intel",
        warnings=tuple(warnings),
    )


def _module_version(module: str, distribution: str) -> str | None:
    try:
        imported = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - any import failure means "not usable"
        return None
    version = getattr(imported, "__version__", None)
    if version:
        return str(version)
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def installed_versions(probe_intel: bool) -> Versions:
    """Probe the environment; the intel packages are imported only when asked for."""
    return Versions(
        torch=importlib.metadata.version("torch"),
        transformers=importlib.metadata.version("transformers"),
        ipex=_module_version("intel_extension_for_pytorch", "intel_extension_for_pytorch")
        if probe_intel
        else None,
        oneccl=_module_version("oneccl_bindings_for_pytorch", "oneccl_bind_pt")
        if probe_intel
        else None,
    )
