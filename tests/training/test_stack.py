import re

import pytest

from xeoncluster.node.startup.stack_check import StackError, StackPlan, Versions, plan_stack

STOCK = Versions(torch="2.13.0+cpu", transformers="5.23.0")
INTEL = Versions(torch="2.7.0+cpu", transformers="4.52.4", ipex="2.7.0+cpu", oneccl="2.7.0+cpu")


def plan(
    stack: str = "stock",
    backend: str = "auto",
    precision: str = "fp32",
    native: bool = True,
    world: int = 2,
    versions: Versions = STOCK,
) -> StackPlan:
    return plan_stack(stack, backend, precision, native, world, versions)


def test_stock_uses_gloo_for_several_ranks_and_no_backend_for_one() -> None:
    assert plan(world=4).backend == "gloo"
    assert plan(world=1).backend is None
    assert not plan().use_ipex


def test_ccl_on_stock_is_refused() -> None:
    with pytest.raises(StackError, match=r"ccl.*--stack intel"):
        plan(backend="ccl")


def test_intel_needs_ipex() -> None:
    with pytest.raises(StackError, match="intel_extension_for_pytorch"):
        plan("intel", versions=Versions(torch="2.7.0", transformers="4.52.4", oneccl="2.7.0"))


def test_intel_needs_oneccl_bindings() -> None:
    with pytest.raises(StackError, match="oneccl_bindings_for_pytorch"):
        plan("intel", versions=Versions(torch="2.7.0", transformers="4.52.4", ipex="2.7.0"))


def test_intel_needs_ipex_matching_torch_major_minor() -> None:
    mismatched = Versions(torch="2.13.0+cpu", transformers="4.52.4", ipex="2.8.0+cpu", oneccl="2.7.0")
    with pytest.raises(StackError, match=r"IPEX 2.8.0\+cpu does not match torch 2.13.0"):
        plan("intel", versions=mismatched)


def test_intel_ccl_needs_a_transformers_that_still_has_ccl() -> None:
    new_transformers = Versions(torch="2.7.0", transformers="5.23.0", ipex="2.7.1", oneccl="2.7.0")
    with pytest.raises(StackError, match=re.escape("transformers <= 5.0.0")):
        plan("intel", versions=new_transformers)


def test_consistent_intel_stack_plans_ccl_and_ipex() -> None:
    result = plan("intel", versions=INTEL)
    assert (result.backend, result.use_ipex) == ("ccl", True)
    assert plan("intel", versions=INTEL, world=1).backend is None


def test_bf16_without_native_support_warns_but_is_allowed() -> None:
    result = plan(precision="bf16", native=False)
    assert result.warnings and "bf16" in result.warnings[0]
    assert plan(precision="bf16", native=True).warnings == ()


def test_unknown_names_are_refused() -> None:
    with pytest.raises(StackError):
        plan("conda")
    with pytest.raises(StackError):
        plan(backend="nccl")
