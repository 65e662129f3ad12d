"""Lists of designs and block fields come from the variant registry and the Blocks dataclasses (issue 23, item 2):
runners.tables, the join keys and the test matrices never keep a hand-written copy."""
import json
from dataclasses import dataclass, fields

import pandas as pd

import variants
from runners import tables as T
from variants import TritonVariant
from variants.blocks import AtomicBlocks
from variants.registry import _VARIANTS, register_variant

# The columns' order before they were derived: a table read today keeps it (new fields come after).
ORDER_BEFORE = ("BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "BLK_SLICE_FACTOR", "num_warps",
                "num_stages", "num_warps1", "num_stages1", "num_warps2", "num_stages2", "prescale", "longest_first",
                "deterministic", "split_dkdv", "split_d")


def registered_triton():
    return [n for n in variants.names() if isinstance(variants.get(n), TritonVariant)]


def test_design_lists_are_the_registry():
    assert sorted(T.TRITON_VARIANTS) == registered_triton()
    assert {"two_pass", "atomic", "atomic_tma", "fused"} <= set(T.TRITON_VARIANTS)
    assert sorted(T.VARIANT_ORDER) == variants.names()
    assert tuple(T.VARIANT_ORDER) == tuple(T.TRITON_VARIANTS) + tuple(T.BASELINE_VARIANTS)
    assert T.BASELINE_VARIANTS[-1] == "reference" and not set(T.BASELINE_VARIANTS) & set(T.TRITON_VARIANTS)
    # registration order (variants/__init__.py): the designs and baselines kept the order they were listed in
    order = list(T.VARIANT_ORDER)
    assert order.index("two_pass") < order.index("atomic") < order.index("atomic_tma") < order.index("fused")
    assert [v for v in order if v.startswith("sdpa") or v in ("flex", "reference")] == [
        "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex", "reference"]
    for name in variants.names():
        assert T.is_triton(name) == (name in registered_triton())
    assert T.is_triton("atomic+deterministic") and not T.is_triton("removed_design")


def test_block_fields_are_every_dataclass_field_in_a_stable_order():
    declared = {f.name: f.default for n in variants.names() for f in fields(variants.get(n).Blocks)}
    assert set(T.BLOCK_FIELDS) == set(declared) | set(ORDER_BEFORE)
    assert tuple(T.BLOCK_FIELDS[:len(ORDER_BEFORE)]) == ORDER_BEFORE
    assert {"tma_load", "tma_reduce", "warp_specialize"} <= set(T.BLOCK_FIELDS)  # atomic_tma's, missing before
    assert len(set(T.BLOCK_FIELDS)) == len(T.BLOCK_FIELDS)
    assert set(T.SWITCH_FIELDS) == {f for f, d in declared.items() if isinstance(d, bool)}
    assert tuple(T.SWITCH_FIELDS[:5]) == ("prescale", "longest_first", "deterministic", "split_dkdv", "split_d")
    assert T.block_fields() == tuple(T.BLOCK_FIELDS) and T.switch_fields() == tuple(T.SWITCH_FIELDS)


def test_lists_read_like_tuples():
    assert T.TRITON_VARIANTS == tuple(T.TRITON_VARIANTS) and "two_pass" in T.TRITON_VARIANTS
    assert list(T.BLOCK_FIELDS) == [*T.BLOCK_FIELDS] and len(T.BLOCK_FIELDS) == len(tuple(T.BLOCK_FIELDS))
    assert T.BLOCK_FIELDS[0] == "BLOCK_M" and ("x",) + T.TRITON_VARIANTS == ("x", *T.TRITON_VARIANTS)
    assert repr(T.TRITON_VARIANTS) == repr(tuple(T.TRITON_VARIANTS))


def _row(variant, blocks, **extra):
    shape = dict(batch=1, heads=2, kv_heads=2, seq=128, seq_k=128, head_dim=64, causal=False, layout="bnhd")
    return {"variant": variant, **shape, "dtype": "fp16", "status": "ok", "correct": True, "timer": "cuda_event",
            "commit": "abc", "timestamp": "2026-01-01T00:00:00+00:00", "config_key": f"{variant}|{json.dumps(blocks)}",
            "tflops": 1.0, **blocks, **extra}


def test_an_old_atomic_tma_row_reads_with_its_dataclass_defaults():
    """A row written before atomic_tma's switches were columns (no blocks_json, no tma_* columns) gets the
    declared defaults and the same join key as a row that wrote them."""
    base = {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2}
    old = _row("atomic_tma", base)
    new = _row("atomic_tma", {**base, "tma_load": True, "tma_reduce": True, "warp_specialize": False,
                              "deterministic": False, "longest_first": False}, timestamp="2026-01-02T00:00:00+00:00")
    other = _row("two_pass", {"BLOCK_M1": 32})
    df = T.normalize(pd.DataFrame([old, new, other]))
    assert df.loc[0, "join_key"] == df.loc[1, "join_key"]
    assert (df.loc[0, "tma_load"], df.loc[0, "tma_reduce"], df.loc[0, "warp_specialize"]) == (True, True, False)
    assert pd.isna(df.loc[2, "tma_load"])  # not a two_pass field
    assert "tma_load" not in df.loc[2, "join_key"] and "tma_load" not in T.blocks_text(df.loc[2])
    assert T.blocks_text(df.loc[0]) == "M=64 N=128 w8 s2 tma_load tma_reduce"
    off = T.normalize(pd.DataFrame([_row("atomic_tma", {**base, "tma_load": False})]))
    assert "tma_load=false" in off.loc[0, "join_key"] and T.blocks_text(off.loc[0]) == "M=64 N=128 w8 s2 tma_reduce"


def test_a_design_registered_later_is_in_every_list():
    """A design registered after the lists were first read (a plugin) and its new block field show up."""
    @dataclass(frozen=True)
    class ThrowawayBlocks(AtomicBlocks):
        throwaway_knob: int = 3
        throwaway_switch: bool = False

    assert "throwaway_knob" not in T.BLOCK_FIELDS  # read once before registering
    try:
        @register_variant("throwaway_design")
        class Throwaway(TritonVariant):
            Blocks = ThrowawayBlocks

        assert "throwaway_design" in T.TRITON_VARIANTS and T.is_triton("throwaway_design")
        assert T.VARIANT_ORDER.index("throwaway_design") < T.VARIANT_ORDER.index("sdpa_flash")
        assert T.BLOCK_FIELDS[-2:] == ("throwaway_knob", "throwaway_switch")
        assert "throwaway_switch" in T.SWITCH_FIELDS and "throwaway_knob" not in T.SWITCH_FIELDS
        df = T.normalize(pd.DataFrame([_row("throwaway_design", {"BLOCK_M": 32}),
                                       _row("throwaway_design", {"BLOCK_M": 32, "throwaway_knob": 5})]))
        assert df.loc[0, "throwaway_knob"] == 3 and "throwaway_knob" not in df.loc[0, "join_key"]
        assert "throwaway_knob=5" in df.loc[1, "join_key"]
        assert T.blocks_text(df.loc[1]) == "M=32 N=64 w4 s2 throwaway_knob=5"
    finally:
        _VARIANTS.pop("throwaway_design", None)
        T.declared_defaults.cache_clear()
    assert "throwaway_design" not in T.TRITON_VARIANTS and "throwaway_knob" not in T.BLOCK_FIELDS


def test_test_matrices_come_from_the_registry():
    """The correctness matrices parametrize over every registered design; the packed one over those that serve
    packed batches; a design the interpreter cannot run is skipped there, with its reason."""
    import pytest

    from tests import test_block_defaults, test_variants, test_varlen
    assert test_variants.TRITON_VARIANTS == registered_triton() == test_block_defaults.TRITON_VARIANTS
    assert test_varlen.VARLEN_VARIANTS == [n for n in registered_triton() if variants.get(n).supports_varlen]
    assert {case.values[0] for case in test_variants.CASES} == set(registered_triton())
    for case in test_variants.CASES:
        skips = [m for m in case.marks if m.name == "skip"]
        assert bool(skips) == (variants.get(case.values[0]).runs_in_interpreter is False
                               and variants.base.interpreter_on()), case.id
    with pytest.raises(pytest.fail.Exception, match="design 'no_such_design' has no SMALL_BLOCKS entry"):
        test_variants.small_blocks("no_such_design")


def test_a_design_opts_out_of_the_interpreter_matrix():
    """`runs_in_interpreter = False` (a Gluon design) is skipped in the interpreter with the reason, nowhere else."""
    from tests.test_variants import design, skipped_here

    class Gluonish(TritonVariant):
        runs_in_interpreter = False
    assert variants.Variant.runs_in_interpreter and TritonVariant.runs_in_interpreter
    try:
        register_variant("gluonish_design")(Gluonish)
        param = design("gluonish_design")
        if variants.base.interpreter_on():
            assert "cannot run in the Triton interpreter" in skipped_here("gluonish_design")
            assert [m.name for m in param.marks] == ["skip"]
        else:
            assert skipped_here("gluonish_design") is None and not param.marks
        assert design("two_pass").marks == () and skipped_here("two_pass") is None
    finally:
        _VARIANTS.pop("gluonish_design", None)
