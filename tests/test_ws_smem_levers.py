"""results/h100/gluon/frontier_probe.md proposals 2 and 3 (ws's and ws_two_pass's block fields `ds_layout`: P's and dS's
shared layout, `stats_pairs`: LSE and delta as one tile of 64-bit pairs): the block rules, the compile check for sm90
(shared memory, spills, and the shared-memory instructions the step issues: scripts/ws_smem_probe.py), and on an sm90
GPU the reference (the schedule options of tests/test_ws.py carry the ws cases; ws_two_pass and deterministic here)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from runners.compile.resources import parse_blocks
from tests.test_variants import make_inputs, run_and_check
from tests.test_ws import MAX_SMEM, ON_HOPPER, compiled_rows
from variants.blocks import WsBlocks, WsTwoPassBlocks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("cls", [WsBlocks, WsTwoPassBlocks])
def test_the_fields_default_off_and_are_searched(cls):
    blocks = cls()
    assert (blocks.ds_layout, blocks.stats_pairs) == ("swz128", False)
    space = cls.search_space()
    assert space["ds_layout"] == ("swz128", "swz64", "transposed") and space["stats_pairs"] == (False, True)
    for value in space["ds_layout"]:
        assert cls.from_dict(dict(ds_layout=value)).ds_layout == value


@pytest.mark.parametrize("cls, fields, rule", [
    (WsBlocks, dict(ds_layout="swz32"), "ds_layout='swz32': must be one of swz128, swz64, transposed"),
    (WsTwoPassBlocks, dict(ds_layout="default"), "ds_layout='default': must be one of"),
    (WsBlocks, dict(stats_pairs=True, warp_specialize=False), "stats_pairs=true: needs warp_specialize=true"),
    (WsBlocks, dict(stats_pairs="yes"), "stats_pairs='yes': must be true or false")])
def test_bad_values_name_the_rule(cls, fields, rule):
    with pytest.raises(ValueError, match=rule.replace("(", r"\(")):
        cls.from_dict(fields)


def test_the_kernel_and_the_blocks_know_the_same_layouts():
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING is not None:
        pytest.skip(GLUON_MISSING)
    from kernels.gluon.ws import ds_shared_layout
    layouts = {name: ds_shared_layout([128, 128], torch.bfloat16, name) for name in WsBlocks.search_space()["ds_layout"]}
    assert layouts["swz128"].swizzle_byte_width == 128 and not layouts["swz128"].transposed
    assert layouts["swz64"].swizzle_byte_width == 64 and not layouts["swz64"].transposed
    assert layouts["transposed"].swizzle_byte_width == 128 and layouts["transposed"].transposed
    with pytest.raises(ValueError, match="ds_layout='swz16'"):
        ds_shared_layout([128, 128], torch.bfloat16, "swz16")


def test_compile_check_takes_a_string_block_value():
    assert parse_blocks("ds_layout=transposed,stats_pairs=true,BLOCK_M=64") == dict(
        ds_layout="transposed", stats_pairs=True, BLOCK_M=64)


COMPILED = [(64, False, "{'ds_layout': 'swz64'}"), (64, False, "{'ds_layout': 'transposed'}"),
            (64, False, "{'stats_pairs': True}"), (128, False, "{'ds_layout': 'transposed'}"),
            (128, True, "{'ds_layout': 'swz64'}"), (128, True, "{'stats_pairs': True}")]


@pytest.mark.parametrize("head_dim, causal, blocks", COMPILED,
                         ids=[f"D{d}{'-causal' if c else ''}-{b.split(':')[1].strip(' }')}" for d, c, b in COMPILED])
def test_the_values_compile_for_sm90_within_shared_memory(head_dim, causal, blocks):
    """Each value at D64's (128 x 128, swap_ab=false) and D128's (swap AB) default tiles: compiles within shared memory
    (scripts/ws_smem_probe.py --both has the registers and spills of every case under both Tritons)."""
    (row,) = compiled_rows(head_dim, causal, blocks)
    assert row["status"] == "ok", row["status"]
    assert int(row["smem_bytes"]) <= MAX_SMEM, row
    if head_dim == 64 and "ds_layout" in blocks:  # as the default there: no spills
        assert row["spill_store_bytes"] == 0, row


def test_ws_two_pass_compiles_with_both_levers():
    rows = compiled_rows(64, True, "{'swap_ab': False, 'BLOCK_M': 128, 'ds_layout': 'transposed', "
                                   "'stats_pairs': True}", variant="ws_two_pass",
                         kernels=("_ws_backward_kernel",))
    assert rows[0]["status"] == "ok" and int(rows[0]["smem_bytes"]) <= MAX_SMEM, rows


def _step_instructions(head_dim: int, causal: bool, overrides: dict) -> dict:
    """scripts/ws_smem_probe.py's counts of ws's compiled step, in a fresh process: {'ptx': ..., 'sass': ...} as
    'op xN, ...' of the compute warps' step."""
    code = ("import json, sys; sys.path.insert(0, 'scripts'); import ws_smem_probe as p; "
            "from runners.compile.resources import use_compiler_not_interpreter, capture_launches, compile_kernel; "
            "use_compiler_not_interpreter(); "
            f"_, _, ls = capture_launches('ws', {head_dim}, 'bf16', {causal}, 16, 16, {overrides!r}); "
            "c = compile_kernel(*next(x for x in ls if x[0].__name__ == '_ws_backward_kernel')); "
            "print(json.dumps(dict(ptx=p.short(p.ptx_counts(c.asm['ptx']), 'step'), "
            "sass=p.short(p.sass_counts(c.asm['cubin']), 'step'))))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_stats_pairs_halve_the_step_loads_at_d128():
    """D128 (swap AB): 16 64-bit LSE / delta loads per step become 8 128-bit ones (LDS.128)."""
    before, after = _step_instructions(128, False, {}), _step_instructions(128, False, dict(stats_pairs=True))
    assert "ld.shared.v2.b32 x16" in before["ptx"] and "LDS.64 x16" in before["sass"], before
    assert "ld.shared.v4.b32 x8" in after["ptx"] and "LDS.128 x8" in after["sass"], after
    assert "LDS.64" not in after["sass"], after


def test_transposed_ds_stores_by_stmatrix_trans_at_d64():
    """D64 (swap_ab=false): P's and dS's 16 stmatrix.x4 per step become stmatrix.x4.trans (STSM.16.MT88.4)."""
    after = _step_instructions(64, False, dict(ds_layout="transposed"))
    assert "stmatrix.x4.trans x16" in after["ptx"] and "STSM.16.MT88.4 x16" in after["sass"], after


LEVERS = [dict(ds_layout="transposed", swap_ab=False, stats_pairs=True), dict(ds_layout="swz64", stats_pairs=True)]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("variant, extra", [("ws", dict(deterministic=True)), ("ws_two_pass", {})],
                         ids=["ws-deterministic", "ws_two_pass"])
@pytest.mark.parametrize("levers", LEVERS, ids=["transposed-mn-pairs", "swz64-pairs"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_dkdv_kernel_without_dq_matches_reference_on_hopper(variant, extra, levers, head_dim, causal):
    torch.manual_seed(hash((variant, head_dim, causal)) % 2**31)
    q, k, v, do = make_inputs((2, 333, 200, 4, 2, head_dim), torch.bfloat16, "cuda")
    run_and_check(variant, q, k, v, do, causal, blocks=dict(levers, **extra))
