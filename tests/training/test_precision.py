from xeoncluster.node.startup.precision import has_native_bf16, resolve_precision

SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
ICE_LAKE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\nbugs\t\t: spectre\n"
ZEN4 = "flags : sse avx512f avx512_bf16"


def test_auto_picks_bf16_only_with_native_support() -> None:
    assert resolve_precision("auto", SAPPHIRE_RAPIDS) == "bf16"
    assert resolve_precision("auto", ZEN4) == "bf16"
    assert resolve_precision("auto", ICE_LAKE) == "fp32"
    assert resolve_precision("auto", "") == "fp32"


def test_bare_flag_strings_work_too() -> None:
    assert has_native_bf16("fpu amx_bf16")
    assert not has_native_bf16("fpu avx512f amx_bf16_not_really")


def test_flags_outside_the_flags_line_do_not_count() -> None:
    assert not has_native_bf16("model name : amx_bf16 marketing\nflags : avx2\n")


def test_explicit_choices_are_kept() -> None:
    assert resolve_precision("bf16", ICE_LAKE) == "bf16"
    assert resolve_precision("fp32", SAPPHIRE_RAPIDS) == "fp32"
