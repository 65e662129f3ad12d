"""ws (Gluon, sm90): compiled for sm90 on any machine (CPU: Triton's bundled ptxas), run against the fp32 reference
on an sm90 GPU, and refused with a reason everywhere else."""
import json
import re
import subprocess
import sys

import pytest
import torch

from tests.test_variants import make_inputs, run_and_check, shape_id
from variants import get
from variants.blocks import WsBlocks
from variants.problem import Problem

ON_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
MAX_SMEM = 227 * 1024

# (head dim, causal) at the default tiles: compile for sm90, then what must hold.
COMPILE_CASES = [(64, False), (128, True), (96, False), (256, True)]


def compiled_rows(head_dim: int, causal: bool, blocks: str = "", variant: str = "ws",
                  kernels: tuple = ("_ws_backward_kernel",), head_dim_v: int | None = None, heads: int = 4,
                  kv_heads: int = 2) -> list[dict]:
    """runners.compile_check's rows for a Gluon design's kernels (ws's main kernel by default), in a fresh process
    (the compiler, not the interpreter). head_dim_v: V's head dim (issue 47; None: head_dim)."""
    code = ("import json, sys; from runners.compile.resources import check; "
            f"print(json.dumps(check({variant!r}, {head_dim}, 'bf16', {causal}, {heads}, {kv_heads}, "
            f"{blocks or '{}'}, {list(kernels)}, modifiers={{'head_dim_v': {head_dim_v}}})))")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("head_dim, causal", COMPILE_CASES, ids=[f"D{d}-{'causal' if c else 'full'}" for d, c in COMPILE_CASES])
def test_compiles_for_sm90_within_shared_memory(head_dim, causal):
    rows = compiled_rows(head_dim, causal)
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["status"] == "ok", row["status"]
    assert row["smem_bytes"] <= MAX_SMEM and row["programs_per_sm"] >= 1
    # spills: test_default_blocks_spill_at_most_what_was_measured (both designs, causal and not)


# issue 43: ws's and ws_two_pass's kernels at their sm90 default blocks, D64 and D128, causal and not. Spill bytes
# (stored and loaded) allowed: 0, except ws's compute warps where the spill-free variant measured slower on an H100
# (results/h100/gluon/ab_issue43/ws_stats/README.md: LSE / delta loaded at use, 0 B spilled, lost 2-3 % at D128
# causal and ~2 % at D64 full). Triton 3.9 here: D64 causal (persistent since results/h100/gluon/ab_issue43/
# persistent64: 1.3-4.8 % faster at N <= 4096, measured under 3.6 with its 8 / 16 B) 68 / 112 B (not persistent 8 / 32),
# D128 28 / 56 and 40 / 68 B (3.6: 44 / 52 and 16 / 16), ws_two_pass's dK/dV kernel at D128 causal 4 / 20 B (3.6: 0);
# scripts/ws_spill_probe.py says where (the compute warps). D64 non-causal (FA4's tile since
# results/h200/gluon/ab_issue43/d64_swap128: swap AB 128 x 128, late_stats, named_handover; 3.4-5.6 % faster) 16 / 40 B
# (3.6: 12 / 12). D64 causal with split_masked (results/h100/gluon/ab_issue43/split_masked: 1.007-1.040x under 3.6,
# where it spills 60 / 64 B) 172 / 296 B here: two step bodies, the unmasked one (596 SASS instructions a step
# against the masked one's 867) with 5 spill ops a step, the masked one with 13.
# From 4096 keys D64 causal runs FA4's swap-AB tile, not persistent, one step body (results/h100/gluon/ab_issue43/
# swap64_causal): 196 / 292 B here, 36 / 36 under 3.6 (test_long_sequence_rules_compile_within_their_spill_bound).
SPILL_BOUND = {("ws", 64, True): 296, ("ws", 64, False): 64, ("ws", 128, False): 96, ("ws", 128, True): 96,
               ("ws_two_pass", 128, True): 32}
NO_SPILL_CASES = [(variant, head_dim, causal) for variant in ("ws", "ws_two_pass") for head_dim in (64, 128)
                  for causal in (False, True)]


@pytest.mark.parametrize("variant, head_dim, causal", NO_SPILL_CASES,
                         ids=[f"{v}-D{d}-{'causal' if c else 'full'}" for v, d, c in NO_SPILL_CASES])
def test_default_blocks_spill_at_most_what_was_measured(variant, head_dim, causal):
    """Issue 43: the kernels compile for sm90 at the default blocks with no more spilled bytes than SPILL_BOUND
    allows (0 but for ws's compute warps; Triton 3.9 here; 3.6 by scripts/ws_spill_probe.py,
    results/compiled_sm90/ws_spills.md). D64 causal's 224 B (the causal mask's key indices hoisted out of the step
    loop) are gone; a bound that grows needs a new measurement."""
    kernels = ("_ws_backward_kernel",) + (("_ws_dq_kernel",) if variant == "ws_two_pass" else ())
    rows = compiled_rows(head_dim, causal, variant=variant, kernels=kernels)
    assert [row["kernel"] for row in rows] == list(kernels), rows
    bound = SPILL_BOUND.get((variant, head_dim, causal), 0)
    for row in rows:
        assert row["status"] == "ok", row["status"]
        limit = bound if row["kernel"] == "_ws_backward_kernel" else 0
        assert max(int(row["spill_store_bytes"]), int(row["spill_load_bytes"])) <= limit, row


def long_sequence_rules() -> list[tuple[int, bool, dict]]:
    """ws's dense sm90 rules that only sequences of `seq_min` keys reach (the compile probe's problem has 4 x the
    largest block, 512 keys, so the tests above compile the short-sequence rules): (head dim, causal, blocks)."""
    from variants.block_defaults import load_table
    plain = ("softcap", "windowed", "group_min", "head_dim", "head_dim_v", "dtype")
    return [(rule["when"]["head_dim_max"], rule["when"]["causal"], rule["blocks"])
            for rule in load_table()["9.0"]["ws"]
            if "seq_min" in rule["when"] and rule["when"].get("varlen") is False
            and not any(key in rule["when"] for key in plain)]


LONG_RULES = long_sequence_rules()


@pytest.mark.parametrize("head_dim, causal, blocks", LONG_RULES,
                         ids=[f"D{d}-{'causal' if c else 'full'}-seq-min" for d, c, _ in LONG_RULES])
def test_long_sequence_rules_compile_within_their_spill_bound(head_dim, causal, blocks):
    """Issue 43: a `seq_min` rule's tiles (from 4096 keys: D64 causal FA4's swap-AB tile, D64 non-causal that tile not
    persistent, D128 causal split_masked) compile for sm90 within shared memory and spill no more than the rules
    below them (SPILL_BOUND)."""
    assert {(64, True), (128, True)} <= {(d, c) for d, c, _ in LONG_RULES}
    row = compiled_rows(head_dim, causal, repr(blocks))[0]
    assert row["status"] == "ok", row["status"]
    assert row["smem_bytes"] <= MAX_SMEM, row
    limit = SPILL_BOUND.get(("ws", head_dim, causal), 0)
    assert max(int(row["spill_store_bytes"]), int(row["spill_load_bytes"])) <= limit, row


@pytest.mark.parametrize("variant, kernels, head_dim, head_dim_v", [
    ("ws", ("_ws_backward_kernel",), 192, 128), ("ws_two_pass", ("_ws_backward_kernel", "_ws_dq_kernel"), 192, 128),
    ("ws", ("_ws_backward_kernel",), 64, 128)], ids=["ws-192-128", "ws_two_pass-192-128", "ws-64-128"])
def test_mla_head_dims_compile_for_sm90(variant, kernels, head_dim, head_dim_v):
    """Issue 47: DeepSeek's D 192 / Dv 128 (V, dO, dV tiles of 128 columns) and 64 / 128 (D128's tiles: the block
    rules bound the wider head dim) at the default tiles, causal: compiles for sm90 within shared memory, no spills;
    the row names the value head dim."""
    rows = compiled_rows(head_dim, True, variant=variant, kernels=kernels, head_dim_v=head_dim_v)
    assert [row["kernel"] for row in rows] == list(kernels), rows
    for row in rows:
        assert row["status"] == "ok", row["status"]
        assert int(row["smem_bytes"]) <= MAX_SMEM and int(row["spill_store_bytes"]) == 0, row
        assert f"dv={head_dim_v}" in row["modifiers"], row["modifiers"]


def test_oversized_tiles_are_reported_not_crashed():
    """128 x 128 tiles at D=128 need ~288 KB of shared memory: a row that says so, not an exception."""
    row = compiled_rows(128, False, "{'BLOCK_M': 128}")[0]
    assert row["status"].startswith("OutOfResources: shared memory"), row["status"]


@pytest.mark.parametrize("fields, rule", [
    (dict(num_warps=2), "num_warps=2"), (dict(BLOCK_M=32), "BLOCK_M=32"),
    (dict(BLOCK_N=64, num_warps=8), "multiple of 16 x num_warps"), (dict(num_stages=0), "num_stages=0"),
    (dict(swap_ab=False, BLOCK_N=32, num_warps=4), "multiple of 64 with swap_ab=false"),
    (dict(prefetch_scores=True, num_stages=1), "prefetch_scores=true: needs num_stages >= 2"),
    (dict(p_in_dq=True), "p_in_dq=true: needs swap_ab=false"),
    (dict(named_handover=True, num_warps=4, BLOCK_N=64), "named_handover=true: needs num_warps=8"),
    (dict(named_handover=True, deterministic=True), "named_handover=true: needs num_warps=8")])
def test_bad_blocks_name_the_rule(fields, rule):
    with pytest.raises(ValueError, match=rule):
        WsBlocks.from_dict(fields)


def test_a_default_named_handover_yields_to_the_fields_it_cannot_run_with():
    """D128 non-causal's default rule turns named_handover on (issue 43); an override it cannot run with (4 warps,
    deterministic mode) turns it off again instead of failing, and naming both fails with the rule's line."""
    from runners.compile.resources import probe_problem
    from variants import get

    ws = get("ws")
    problem = probe_problem(128, "bf16", False, 2, 2, {})
    assert ws.make_blocks(problem).named_handover
    assert not ws.make_blocks(problem, {"num_warps": 4, "BLOCK_N": 64}).named_handover
    assert not ws.make_blocks(problem, {"deterministic": True}).named_handover
    with pytest.raises(ValueError, match="named_handover=true: needs num_warps=8"):
        ws.make_blocks(problem, {"deterministic": True, "named_handover": True})
    # causal: on with the non-causal rule's fields since results/h100/gluon/ab_issue43/split_masked, where it yields too
    assert ws.make_blocks(probe_problem(128, "bf16", True, 2, 2, {})).named_handover
    assert not ws.make_blocks(probe_problem(128, "bf16", True, 2, 2, {}), {"num_warps": 4, "BLOCK_N": 64}).named_handover


@pytest.mark.skipif(ON_HOPPER, reason="on an sm90 GPU ws runs")
def test_refused_with_a_reason_off_hopper():
    problem = Problem(1, 128, 128, 2, 2, 64, False, torch.float16, "cuda" if torch.cuda.is_available() else "cpu")
    reason = get("ws").supports(problem)
    assert reason and ("sm90" in reason or "Gluon" in reason), reason


@pytest.mark.parametrize("head_dim, dtype, varlen", [(80, torch.bfloat16, False), (64, torch.float32, False),
                                                     (80, torch.bfloat16, True)])
def test_uncovered_problems_are_refused(head_dim, dtype, varlen):
    problem = Problem(1, 64, 64, 2, 2, head_dim, False, dtype, "cuda", (64,) if varlen else None,
                      (64,) if varlen else None)
    assert get("ws").supports(problem)


# (B, Nq, Nk, H, Hkv, D): tails of every kind, Nq != Nk both ways (causal rows with no key), GQA 2:1, MQA, two
# batches (the 2-D TMA views read across the batch boundary), both head dims.
GPU_SHAPES = [(2, 200, 333, 4, 2, 64), (1, 333, 200, 4, 1, 128), (2, 256, 256, 2, 2, 128), (1, 1, 70, 2, 1, 64),
              (3, 1000, 1000, 2, 1, 128)]
FAST_GPU = {((2, 200, 333, 4, 2, 64), True, torch.bfloat16), ((1, 333, 200, 4, 1, 128), False, torch.float16)}
GPU_CASES = [pytest.param(shape, causal, dtype, id=f"{shape_id(shape, causal)}-{str(dtype)[6:]}",
                          marks=() if (shape, causal, dtype) in FAST_GPU else pytest.mark.slow)
             for shape in GPU_SHAPES for causal in (False, True) for dtype in (torch.float16, torch.bfloat16)]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("shape, causal, dtype", GPU_CASES)
def test_matches_reference_on_hopper(shape, causal, dtype):
    torch.manual_seed(hash((shape, causal)) % 2**31)
    run_and_check("ws", *make_inputs(shape, dtype, "cuda"), causal)


SWAP_AB = dict(swap_ab=True, BLOCK_M=64)  # the swap-AB schedules, named in full (D64 defaults to swap_ab=false)


@pytest.mark.parametrize("blocks", [dict(num_warps=4, BLOCK_N=64), dict(SWAP_AB, num_warps=4, BLOCK_N=128, num_stages=3),
                                    dict(BLOCK_M=128, BLOCK_N=128, swap_ab=True), dict(warp_specialize=False),
                                    dict(warp_specialize=False, num_stages=3), dict(swap_ab=False),
                                    dict(swap_ab=False, BLOCK_M=128), dict(swap_ab=False, warp_specialize=False),
                                    dict(swap_ab=False, num_warps=4),
                                    dict(swap_ab=False, num_warps=4, BLOCK_N=64, num_stages=3),
                                    dict(longest_first=False), dict(SWAP_AB), dict(SWAP_AB, num_warps=4, BLOCK_N=64),
                                    dict(persistent=True), dict(SWAP_AB, persistent=True)],
                         ids=["w4-n64", "w4-n128-s3", "m128-n128-swap", "one-partition", "one-partition-s3", "mn",
                              "mn-m128", "mn-one-partition", "mn-w4", "mn-w4-n64-s3", "heads-in-order", "swap",
                              "swap-w4-n64", "persistent", "persistent-swap"])
@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("head_dim", [64, 128])
def test_tiles_match_reference_on_hopper(blocks, head_dim):
    if blocks.get("BLOCK_M") == 128 and head_dim == 128:
        pytest.skip("128 x 128 tiles need ~288-330 KB of shared memory at D=128")
    run_and_check("ws", *make_inputs((2, 300, 300, 2, 1, head_dim), torch.bfloat16, "cuda"), True, blocks=blocks)


# Issue 43's schedule options (prefetch_scores: the next step's S issued before this step's dQ tail; early_dv:
# swap_ab=false's dV wgmma before dP is waited; p_in_dq: swap_ab=false's P over dQ's shared bytes), each with the
# schedules it meets: the default tiles of D64 (S = Q K^T, 128 x 128) and D128 (swap AB), persistent, one
# partition, swap AB at D64, three stages, and options together.
SCHEDULE_OPTIONS = [dict(prefetch_scores=True), dict(prefetch_scores=True, persistent=True),
                    dict(prefetch_scores=True, warp_specialize=False), dict(prefetch_scores=True, **SWAP_AB),
                    dict(early_dv=True, swap_ab=False), dict(early_dv=True, swap_ab=False, persistent=True),
                    dict(early_dv=True, prefetch_scores=True, swap_ab=False), dict(p_in_dq=True, swap_ab=False),
                    dict(p_in_dq=True, swap_ab=False, num_stages=3, early_dv=True),
                    dict(p_in_dq=True, swap_ab=False, warp_specialize=False),
                    dict(named_handover=True), dict(named_handover=True, persistent=True),
                    dict(named_handover=True, **SWAP_AB), dict(named_handover=True, swap_ab=False, BLOCK_M=64),
                    dict(named_handover=True, group_split=2, fp32_partials=False),
                    dict(late_stats=True, swap_ab=True, BLOCK_M=128), dict(late_stats=True, **SWAP_AB),
                    dict(late_stats=True, swap_ab=True, BLOCK_M=128, persistent=True, num_stages=3),
                    dict(dq_first=True), dict(dq_first=True, **SWAP_AB),
                    dict(dq_first=True, named_handover=True, late_stats=True, persistent=True, num_stages=3, **SWAP_AB),
                    dict(dq_first=True, prefetch_scores=True), dict(dq_first=True, warp_specialize=False),
                    dict(dq_first=True, swap_ab=False, early_dv=True),
                    dict(late_stats=True, swap_ab=True, BLOCK_M=128, named_handover=True),
                    dict(split_masked=True), dict(split_masked=True, **SWAP_AB),
                    dict(split_masked=True, dq_first=True, named_handover=True, late_stats=True, persistent=True,
                         num_stages=3, **SWAP_AB),
                    dict(split_masked=True, warp_specialize=False), dict(split_masked=True, prefetch_scores=True),
                    dict(split_masked=True, group_split=2, fp32_partials=False),
                    dict(late_stats=True, swap_ab=True, BLOCK_M=128, named_handover=True, group_split=2,
                         fp32_partials=False, scheduled_chunks=True),
                    dict(late_stats=True, swap_ab=True, BLOCK_M=128, named_handover=True, persistent=True)]
SCHEDULE_IDS = ["prefetch", "prefetch-persistent", "prefetch-one-partition", "prefetch-swap", "early-dv-mn",
                "early-dv-mn-persistent", "early-dv-prefetch-mn", "p-in-dq-mn", "p-in-dq-mn-s3-early-dv",
                "p-in-dq-mn-one-partition", "named-handover", "named-handover-persistent", "named-handover-swap",
                "named-handover-mn-m64", "named-handover-group-split", "late-stats-m128",
                "late-stats-swap", "late-stats-m128-persistent-s3", "dq-first", "dq-first-swap",
                "dq-first-named-late-persistent-s3-swap", "dq-first-prefetch", "dq-first-one-partition",
                "dq-first-early-dv-mn", "late-stats-m128-named", "split-masked", "split-masked-swap",
                "split-masked-dq-first-named-late-persistent-s3-swap", "split-masked-one-partition",
                "split-masked-prefetch", "split-masked-group-split", "late-stats-m128-named-group-split",
                "late-stats-m128-named-persistent"]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("blocks", SCHEDULE_OPTIONS, ids=SCHEDULE_IDS)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(2, 333, 333, 4, 2), (1, 200, 461, 4, 1), (1, 461, 200, 2, 2)],
                         ids=["tails-gqa", "nq<nk-mqa", "nq>nk"])
def test_schedule_options_match_reference_on_hopper(blocks, head_dim, causal, shape):
    """Odd lengths (tails), GQA, Nq != Nk both ways: several steps per tile, so each step's prefetched S meets the
    next step's Q and the last step's its own tail."""
    if head_dim == 128 and blocks.get("BLOCK_M", 64) == 128:
        pytest.skip("128 x 128 tiles do not fit at D=128")
    if (shape[3] // shape[4]) % blocks.get("group_split", 1):
        pytest.skip("group_split must divide the GQA group")
    torch.manual_seed(hash((shape, causal, head_dim)) % 2**31)
    run_and_check("ws", *make_inputs((*shape, head_dim), torch.bfloat16, "cuda"), causal, blocks=blocks)


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("chunk", [2, 4, 9])
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_scheduled_chunks_of_any_size_match_reference_on_hopper(monkeypatch, chunk, persistent, head_dim):
    """scheduled_chunks with chunks of 2, 4 and 9 of the 9 (batch, kv head) pairs (the last chunk short, or one
    chunk), forced: tile_at's numbering covers every tile once, on odd lengths with GQA, causal."""
    import kernels.gluon.ws as ws
    from variants.op import through_operator
    chosen = []
    monkeypatch.setattr(ws, "backward_chunk_heads", lambda *args: chosen.append(chunk) or chunk)
    blocks = dict(scheduled_chunks=True, persistent=persistent)  # each head dim's default stages (D64: 3 overflow)
    torch.manual_seed(chunk)
    with through_operator():  # no plan phase: ws_dkdv works its launch out per call (no memo of another chunk)
        run_and_check("ws", *make_inputs((3, 451, 451, 6, 3, head_dim), torch.bfloat16, "cuda"), True, blocks=blocks)
    assert chosen, "the forced chunk was never asked for"


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("blocks", ["{'prefetch_scores': True}", "{'early_dv': True, 'swap_ab': False}",
                                    "{'p_in_dq': True, 'swap_ab': False, 'num_stages': 3}", "{'group_split': 2}",
                                    "{'split_masked': True}"],
                         ids=["prefetch", "early-dv-mn", "p-in-dq-mn-s3", "group-split", "split-masked"])
def test_schedule_options_compile_for_sm90(blocks, head_dim):
    """Both options compile for sm90 within shared memory at both head dims (spills: see the compile table in
    results/h100/gluon/README.md; the GPU A/B decides)."""
    row = compiled_rows(head_dim, True, blocks)[0]
    assert row["status"] == "ok", row["status"]
    assert int(row["smem_bytes"]) <= MAX_SMEM


WS_PTX = """
import json, sys
from runners.compile.resources import capture_launches, compile_kernel, ptxas_usage
head_dim, causal, overrides = int(sys.argv[1]), sys.argv[2] == "1", json.loads(sys.argv[3])
_, _, launches = capture_launches("ws", head_dim, "bf16", causal, 4, 2, overrides)
fn, args, kwargs = next(launch for launch in launches if launch[0].__name__ == "_ws_backward_kernel")
ptx = compile_kernel(fn, args, kwargs).asm["ptx"]
print(ptxas_usage(ptx)["spill_store_bytes"])
print(ptx)
"""


def ws_main_ptx(head_dim: int, causal: bool, overrides: dict) -> tuple[int, str]:
    """(spilled bytes, PTX) of ws's main kernel compiled for sm90 at the default tiles with `overrides`, in a fresh
    process (@triton.jit without the interpreter)."""
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", WS_PTX, str(head_dim), str(int(causal)), json.dumps(overrides)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    spills, ptx = out.stdout.split("\n", 1)
    return int(spills), ptx


def named_handover_ptx(head_dim: int, causal: bool, named: bool) -> tuple:
    """(spilled bytes, partition barriers that lead an mbarrier arrive, 'bar.arrive 12, 288' count, [bar ids]) of
    ws's main kernel compiled for sm90 at the default tiles, with or without named_handover."""
    spills, ptx = ws_main_ptx(head_dim, causal, {"named_handover": named})
    ids = sorted({int(m) for m in re.findall(r"\b(?:bar|barrier)\.(?:sync|arrive)\s+(\d+)", ptx)})
    lines = ptx.splitlines()
    partition_barriers = sum(1 for i, line in enumerate(lines) if "bar.sync \t0, 256" in line
                             and any("mbarrier.arrive.shared" in later for later in lines[i + 1:i + 5]))
    arrives = ptx.count("bar.arrive 12, 288")
    return spills, partition_barriers, arrives, ids


@pytest.mark.parametrize("head_dim, causal", [(64, False), (128, True)], ids=["D64", "D128-causal"])
def test_named_handover_drops_the_arrives_partition_barrier(head_dim, causal):
    """named_handover (issue 43): the compute warps' dQ hand-over is one bar.arrive on id 12 (no wait), so the
    kernel has one arrive-leading partition barrier fewer than with the mbarrier arrive (Gluon lowers that as a
    barrier of all 256 compute threads, then one thread's arrive); it spills no more, and uses no named-barrier id but Triton's own
    (0, 1) and 12 (kernels.gluon.named)."""
    from kernels.gluon.named import DQ_FULL_ID
    spills, barriers, arrives, ids = named_handover_ptx(head_dim, causal, named=True)
    spills_before, barriers_before, arrives_before, _ = named_handover_ptx(head_dim, causal, named=False)
    assert arrives == 1 and arrives_before == 0
    assert barriers < barriers_before, (barriers, barriers_before)
    assert spills <= spills_before, (spills, spills_before)
    assert set(ids) <= {0, 1, DQ_FULL_ID}, ids


@pytest.mark.parametrize("head_dim, causal", [(64, True), (128, False)], ids=["D64-causal-mn", "D128-swap"])
def test_dq_first_waits_for_dq_with_dk_in_flight(head_dim, causal):
    """dq_first (issue 43): dQ's wgmma is issued before dK's, so the step waits for it with groups still
    outstanding (one more wgmma wait with a non-zero count than the default kernel, as many full waits), and the
    kernel spills at most what the measured bound allows."""
    counts = {}
    for first in (False, True):
        spills, ptx = ws_main_ptx(head_dim, causal, {"dq_first": first})
        waits = re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)
        counts[first] = spills, sum(w != "0" for w in waits), sum(w == "0" for w in waits)
    (spills, partial, full), (_, partial_before, full_before) = counts[True], counts[False]
    assert partial > partial_before and full >= full_before, counts
    assert spills <= SPILL_BOUND.get(("ws", head_dim, causal), 0), counts


@pytest.mark.parametrize("head_dim, causal", [(128, True), (64, True)], ids=["D128-causal-swap", "D64-causal-mn"])
def test_split_masked_compiles_a_second_step_body(head_dim, causal):
    """split_masked (issue 43): a masked problem's step is compiled twice, with the mask (the diagonal's steps and a
    query tail) and without (the middle), so the kernel issues twice the wgmmas of the one-loop kernel; without a
    masked block (non-causal, lengths that are whole tiles) the field changes nothing."""
    ptx = {split: ws_main_ptx(head_dim, causal, {"split_masked": split})[1] for split in (False, True)}
    issued = {split: len(re.findall(r"wgmma\.mma_async", text)) for split, text in ptx.items()}
    assert issued[True] == 2 * issued[False], issued
    dense = [ws_main_ptx(head_dim, False, {"split_masked": split})[1] for split in (False, True)]
    assert dense[0] == dense[1]


def test_late_stats_fit_fa4s_d64_tile():
    """late_stats (issue 43): at D64, FA4's tile (128 x 128, S^T / dP^T swapped, P^T / dS^T from registers) spills
    hundreds of bytes with a step's LSE and delta loaded at its start (32 + 32 registers a thread); loaded at their
    use, it fits within ws's measured spill bound."""
    swap = "{'swap_ab': True, 'BLOCK_M': 128"
    late, early = (compiled_rows(64, False, swap + extra + "}")[0]
                   for extra in (", 'late_stats': True", ", 'late_stats': False"))
    assert late["status"] == "ok", late["status"]
    assert int(late["spill_store_bytes"]) <= 64 < int(early["spill_store_bytes"]), (late, early)


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("blocks", [dict(swap_ab=False), dict(swap_ab=False, BLOCK_M=128)], ids=["mn", "mn-m128"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_unmasked_blocks_match_reference_on_hopper(blocks, causal):
    """Lengths that are whole blocks: non-causal steps take the unmasked path (GQA 2:1, Nq != Nk)."""
    run_and_check("ws", *make_inputs((2, 256, 384, 4, 2, 64), torch.bfloat16, "cuda"), causal, blocks=blocks)


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
def test_program_chunks_cover_every_head_on_hopper():
    """Causal programs run in chunks of heads (longest_first): 16 (batch, kv head) pairs and 9 key blocks give
    chunks of 15 heads on a 132-SM GPU, then a short one of 1 (GQA 2:1 also maps query heads to kv heads)."""
    run_and_check("ws", *make_inputs((2, 1100, 1100, 16, 8, 64), torch.bfloat16, "cuda"), True)


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
def test_bhnd_layout_on_hopper():
    run_and_check("ws", *make_inputs((2, 129, 77, 4, 2, 64), torch.float16, "cuda", layout="bhnd"), True,
                  layout="bhnd")


# Persistent programs walk several tiles only when there are more tiles than SMs: 9 key blocks x 32 (batch, kv head)
# pairs = 288 tiles (GQA 2:1, tails on both sides), so each of the 132 programs walks 2 or 3 of them.
PERSISTENT_BLOCKS = [dict(persistent=True), dict(SWAP_AB, persistent=True), dict(SWAP_AB, persistent=True, num_stages=3),
                     dict(persistent=True, warp_specialize=False)]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("blocks", PERSISTENT_BLOCKS,
                         ids=["default", "swap", "swap-s3", "one-partition"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_persistent_walks_several_tiles_on_hopper(blocks, head_dim, causal):
    run_and_check("ws", *make_inputs((4, 1100, 1077, 16, 8, head_dim), torch.bfloat16, "cuda"), causal, blocks=blocks)


@pytest.mark.parametrize("seq_q, seq_k, causal, group", [(1100, 1077, True, 2), (4096, 4096, True, 1),
                                                         (4096, 4096, False, 1), (333, 1000, True, 4)])
def test_tile_schedule_covers_every_tile_once_and_balances(seq_q, seq_k, causal, group):
    """The host schedule of persistent programs: every tile exactly once, at most one program per SM, the loads
    of the programs within one tile of each other (greedy, longest first under causal masking)."""
    from kernels.gluon.ws import TILE_SETUP_STEPS, chunk_heads, query_steps, tile_key_block, tile_schedule
    block_m, block_n, pairs = 64, 128, 16
    key_blocks = -(-seq_k // block_n)
    steps = query_steps(seq_q, seq_k, block_m, block_n, group, causal)
    per_chunk = chunk_heads(torch.device("cpu"), seq_k, block_n, pairs, causal)
    tiles, starts = tile_schedule(torch.device("cpu"), key_blocks, pairs, per_chunk, steps)
    assert sorted(tiles.tolist()) == list(range(key_blocks * pairs))
    assert starts[0] == 0 and starts[-1] == key_blocks * pairs and len(starts) - 1 <= 132
    assert bool((starts[1:] >= starts[:-1]).all())

    loads = [sum(steps[tile_key_block(t, key_blocks, pairs, per_chunk)] + TILE_SETUP_STEPS
                 for t in tiles[starts[p]:starts[p + 1]].tolist())
             for p in range(len(starts) - 1)]
    assert max(loads) - min(loads) <= max(steps) + TILE_SETUP_STEPS, (min(loads), max(loads))
    if causal and seq_q == seq_k:
        assert steps == tuple(sorted(steps, reverse=True)) and steps[0] > steps[-1]


@pytest.mark.parametrize("head_dim, dtype, covered", [(64, torch.float16, True), (128, torch.bfloat16, True),
                                                      (96, torch.float16, True), (256, torch.bfloat16, True),
                                                      (80, torch.bfloat16, False), (128, torch.float32, False)])
def test_the_problem_rule_asks_no_gpu(head_dim, dtype, covered):
    """Ws.problem_reason: the head dims and dtypes ws covers, on any device (runners.compile_check asks it on a
    CPU); `supports` applies the same rule on an sm90 GPU."""
    reason = get("ws").problem_reason(Problem(1, 64, 64, 2, 2, head_dim, False, dtype, "cpu"))
    assert (reason is None) == covered, reason
    if not covered and head_dim == 80:
        assert "head dims" in reason and "80" in reason, reason


def test_deterministic_needs_the_specialized_dkdv_kernel():
    with pytest.raises(ValueError, match="deterministic=true"):
        WsBlocks.from_dict(dict(deterministic=True, warp_specialize=False))


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_deterministic_mode_matches_reference_and_repeats_bitwise_on_hopper(causal):
    """deterministic=true: dQ by the atomic-free dQ pass; correct (tails, GQA, Nq != Nk) and the same bits every run,
    which the reduce-add path does not promise."""
    from variants import attention
    run_and_check("ws", *make_inputs((2, 300, 333, 4, 2, 128), torch.bfloat16, "cuda"), causal,
                  blocks=dict(deterministic=True))
    q, k, v, do = make_inputs((2, 1024, 1024, 8, 2, 64), torch.bfloat16, "cuda")
    runs = []
    for _ in range(3):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        attention(*leaves, causal=causal, variant="ws", blocks=dict(deterministic=True)).backward(do)
        runs.append([t.grad for t in leaves])
    for other in runs[1:]:
        for name, a, b in zip(("dq", "dk", "dv"), runs[0], other):
            assert torch.equal(a, b), name


# Sliding windows (issue 24): (B, Nq, Nk, H, Hkv, D), causal, window_size. Tails, GQA, Nq != Nk both ways, a
# two-sided window, and Nq < Nk with a window short enough that the first key blocks see no query (0-step tiles).
WINDOW_CASES = [((2, 333, 333, 4, 2, 128), True, (100, 0)), ((1, 200, 333, 2, 1, 64), True, (64, 0)),
                ((1, 333, 200, 4, 4, 128), False, (40, 90)), ((1, 300, 700, 2, 1, 64), True, (50, 0)),
                ((1, 1024, 1024, 2, 2, 128), True, (256, 0))]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("shape, causal, window", WINDOW_CASES, ids=[f"{shape_id(s, c)}-w{w[0]}_{w[1]}"
                                                                     for s, c, w in WINDOW_CASES])
@pytest.mark.parametrize("blocks", [None, dict(persistent=True)], ids=["default", "persistent"])
@pytest.mark.parametrize("softcap", [0.0, 5.0], ids=["", "softcap"])
def test_window_matches_reference_on_hopper(shape, causal, window, blocks, softcap):
    from tests.test_modifiers import check_against_reference
    torch.manual_seed(hash((shape, window)) % 2**31)
    q, k, v, do = make_inputs(shape, torch.bfloat16, "cuda")
    check_against_reference("ws", q, k, v, do, None, causal, window, softcap, blocks=blocks or {})


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("blocks", [dict(prefetch_scores=True), dict(prefetch_scores=True, deterministic=True),
                                    dict(early_dv=True, swap_ab=False), dict(p_in_dq=True, swap_ab=False)],
                         ids=["prefetch", "prefetch-deterministic", "early-dv-mn", "p-in-dq-mn"])
@pytest.mark.parametrize("shape, causal, window", WINDOW_CASES[:4], ids=[f"{shape_id(s, c)}-w{w[0]}_{w[1]}"
                                                                         for s, c, w in WINDOW_CASES[:4]])
def test_schedule_options_with_a_window_on_hopper(blocks, shape, causal, window):
    """Windows give tiles of 0 steps (prefetch_scores issues no S there) and 1 step (only the peeled last step)."""
    from tests.test_modifiers import check_against_reference
    if blocks.get("deterministic"):  # no window in the dQ pass: deterministic alone, windowless
        torch.manual_seed(1)
        run_and_check("ws", *make_inputs(shape, torch.bfloat16, "cuda"), causal, blocks=blocks)
        return
    torch.manual_seed(hash((shape, window)) % 2**31)
    q, k, v, do = make_inputs(shape, torch.bfloat16, "cuda")
    check_against_reference("ws", q, k, v, do, None, causal, window, 0.0, blocks=blocks)


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("shape", [(2, 333, 333, 4, 2, 128), (1, 200, 333, 2, 1, 64), (1, 333, 200, 4, 4, 128)],
                         ids=lambda s: shape_id(s, False)[:-5])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("blocks", [None, dict(swap_ab=False), dict(swap_ab=True, BLOCK_M=64)],
                         ids=["default", "mn", "swap"])
def test_softcap_matches_reference_on_hopper(shape, causal, blocks):
    from tests.test_modifiers import check_against_reference
    torch.manual_seed(hash(shape) % 2**31)
    q, k, v, do = make_inputs(shape, torch.float16, "cuda")
    check_against_reference("ws", q, k, v, do, None, causal, None, 3.0, blocks=blocks or {})


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
def test_window_with_deterministic_is_one_clear_line():
    q, k, v, do = make_inputs((1, 128, 128, 2, 2, 64), torch.bfloat16, "cuda")
    from variants import attention
    with pytest.raises(ValueError, match="deterministic=true has no window or softcap") as err:
        attention(q.requires_grad_(), k, v, causal=True, variant="ws", blocks=dict(deterministic=True),
                  window_size=(32, 0)).backward(do)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("seq_q, seq_k, causal, left, right", [(1000, 1000, True, 100, 0), (300, 700, True, 50, 0),
                                                               (333, 200, False, 40, 90), (500, 500, False, -1, 30)])
def test_window_steps_walk_only_the_band(seq_q, seq_k, causal, left, right):
    """query_steps (the host's copy of `_tile`'s walk) visits exactly the query blocks holding a visible pair of each
    key block: none outside the band, none missing."""
    from kernels.gluon.ws import query_steps
    from variants.reference import visible_pairs
    block_m, block_n = 64, 128
    visible = visible_pairs(seq_q, seq_k, causal, (left, right), "cpu")  # [Nq, Nk]
    expected = []
    for start_n in range(0, seq_k, block_n):
        rows = visible[:, start_n:start_n + block_n].any(1)  # [Nq]: queries that see the key block
        blocks = {int(i) // block_m for i in rows.nonzero()}
        # the walk is contiguous: from the first block with a visible pair to the last
        expected.append(0 if not blocks else max(blocks) - min(blocks) + 1)
    assert query_steps(seq_q, seq_k, block_m, block_n, 1, causal, left, right) == tuple(expected)


def test_large_head_dims_compile_without_spills_for_the_two_pass_twin():
    """ws_two_pass at D192 / D256 (tiles of 256 columns, its compile-checked rule): both kernels fit an sm90 SM's
    shared memory without spilling; so does ws's deterministic mode (its dK/dV kernel without the dQ tile)."""
    for variant, blocks in (("ws_two_pass", ""), ("ws", "{'deterministic': True}")):
        rows = compiled_rows(192 if variant == "ws_two_pass" else 256, True, blocks, variant=variant,
                             kernels=("_ws_backward_kernel", "_ws_dq_kernel"))
        assert {row["kernel"] for row in rows} == {"_ws_backward_kernel", "_ws_dq_kernel"}, rows
        for row in rows:
            assert row["status"] == "ok" and row["spill_store_bytes"] == 0, row


# D96 / D192 / D256 (issue 25): tiles of tile_dim(D) columns, the TMA views zero-filling past D and dropping those
# columns on stores. Tails, GQA, Nq != Nk both ways, two batches; ws, its deterministic mode and ws_two_pass.
LARGE_D_SHAPES = [(2, 200, 333, 4, 2), (1, 333, 200, 4, 1)]
LARGE_D_DESIGNS = [("ws", None), ("ws", dict(deterministic=True)), ("ws_two_pass", None)]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("head_dim", [96, 192, 256])
@pytest.mark.parametrize("shape", LARGE_D_SHAPES, ids=["nq<nk-gqa", "nq>nk-mqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant, blocks", LARGE_D_DESIGNS, ids=["ws", "ws-deterministic", "ws_two_pass"])
def test_large_head_dims_match_reference_on_hopper(variant, blocks, causal, shape, head_dim):
    torch.manual_seed(hash((shape, causal, head_dim)) % 2**31)
    dtype = torch.float16 if head_dim == 192 else torch.bfloat16
    run_and_check(variant, *make_inputs((*shape, head_dim), dtype, "cuda"), causal, blocks=blocks)


# Packed documents (issue 25): odd lengths, a length-1 document, empty documents on either side, Nq != Nk per
# document (rows that see no key under causal masking), GQA; both designs, every head-dim tile.
WS_PACKINGS = {"odd-gqa": ([170, 1, 333, 64], None, 4, 2), "nq-ne-nk-empty": ([0, 77, 200, 3], [50, 0, 260, 129], 2, 1)}


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("head_dim", [64, 96, 128, 256])
@pytest.mark.parametrize("packing", list(WS_PACKINGS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant, blocks", [("ws", None), ("ws", dict(deterministic=True)), ("ws_two_pass", None)],
                         ids=["ws", "ws-deterministic", "ws_two_pass"])
def test_packed_documents_match_reference_on_hopper(variant, blocks, causal, packing, head_dim):
    from tests.test_varlen import packed_inputs, run_and_check_packed
    torch.manual_seed(hash((variant, packing, causal, head_dim)) % 2**31)
    lens_q, lens_k, heads, kv_heads = WS_PACKINGS[packing]
    dtype = torch.float16 if causal else torch.bfloat16
    run_and_check_packed(variant, *packed_inputs(lens_q, lens_k, heads, kv_heads, head_dim, dtype, "cuda"), causal,
                         blocks=blocks)


# Packed documents with a sliding window or softcap: the band and the tanh restart per document (documents shorter
# than the window, an empty one, Nq != Nk per document, GQA); fp16 / bf16.
PACKED_MODIFIED = [("causal-window", True, (40, 0), 0.0), ("full-window-softcap", False, (30, 50), 5.0),
                   ("causal-softcap", True, None, 5.0)]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("packing", list(WS_PACKINGS))
@pytest.mark.parametrize("case, causal, window, softcap", PACKED_MODIFIED, ids=[c[0] for c in PACKED_MODIFIED])
def test_packed_documents_with_a_window_or_softcap_match_reference_on_hopper(case, causal, window, softcap, packing,
                                                                            head_dim):
    from tests.test_modifiers import check_against_reference
    from tests.test_varlen import packed_inputs
    torch.manual_seed(hash((case, packing, head_dim)) % 2**31)
    lens_q, lens_k, heads, kv_heads = WS_PACKINGS[packing]
    dtype = torch.float16 if causal else torch.bfloat16
    q, k, v, do, cu_q, cu_k = packed_inputs(lens_q, lens_k, heads, kv_heads, head_dim, dtype, "cuda")
    check_against_reference("ws", q, k, v, do, None, causal, window, softcap, blocks={}, cu_seqlens_q=cu_q,
                            cu_seqlens_k=cu_k)


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
def test_packed_with_persistent_is_one_clear_line():
    from tests.test_varlen import packed_inputs, run_and_check_packed
    with pytest.raises(ValueError, match="persistent=true does not walk packed"):
        run_and_check_packed("ws", *packed_inputs([100, 50], None, 2, 1, 64, torch.bfloat16, "cuda"), False,
                             blocks=dict(persistent=True))


PACKED_COMPILE = """
import json, torch
from triton.runtime.jit import JITFunction
from kernels.varlen import Packing
from runners.compile.resources import compile_kernel, ptxas_usage
launches = []
JITFunction.run = lambda self, *a, grid, warmup, **k: launches.append((self, a, k))
from kernels.gluon.ws import ws_backward
from kernels.gluon.ws_dq import ws_two_pass_backward
cu = torch.tensor([0, 100, 101, 401], dtype=torch.int32)
q, k, v, do = (torch.randn(1, 401, 2, 192, dtype=torch.bfloat16) for _ in range(4))
lse, delta = torch.zeros(1, 2, 401), torch.zeros(1, 2, 401)
tile = dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, swap_ab=False)
ws_backward(q, k, v, do, lse, delta, causal=True, scale=0.1, varlen=Packing(cu, cu), num_stages=1, **tile)
ws_two_pass_backward(q, k, v, do, lse, delta, causal=True, scale=0.1, varlen=Packing(cu, cu),
                     dkdv_blocks=dict(tile, num_stages=2), dq_blocks=dict(BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=2))
rows = []
for fn, args, kwargs in launches:
    if fn.__name__.startswith("_ws"):
        compiled = compile_kernel(fn, args, kwargs)
        rows.append(dict(kernel=fn.__name__, varlen=kwargs["CFG"].VARLEN, smem=int(compiled.metadata.shared),
                         **ptxas_usage(compiled.asm["ptx"])))
print(json.dumps(rows))
"""


def test_packed_kernels_compile_for_sm90():
    """The packed-document kernels (VARLEN: the (document, block) table, cu_seqlens rows) of ws and both of
    ws_two_pass's compile for sm90 at D192 (two head-dim chunks) within shared memory and without spills."""
    import json
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", PACKED_COMPILE], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert [row["kernel"] for row in rows] == ["_ws_backward_kernel", "_ws_backward_kernel", "_ws_dq_kernel"], rows
    for row in rows:
        assert row["varlen"] and row["smem"] <= MAX_SMEM and row["spill_store_bytes"] == 0, row


# Issue 43: head_dim_split (D96's products in 64 + 32 head-dim chunks instead of one 128-column chunk with 32 zero
# columns). The block rule, the compile check, and on an sm90 GPU the reference: tails, GQA / MQA, Nq != Nk both
# ways, two batches, causal and not, fp16 and bf16, every schedule D96 runs (swap AB and not, persistent, one
# partition, the deterministic dQ pass, ws_two_pass) and packed documents.
@pytest.mark.parametrize("variant", ["ws", "ws_two_pass"])
@pytest.mark.parametrize("head_dim, chunks", [(64, (64, 0)), (96, (64, 32)), (128, (128, 0)), (192, (128, 64)),
                                              (256, (256, 0))])
def test_head_dim_split_applies_at_d96_only(variant, head_dim, chunks):
    from kernels.gluon.tiles import head_dim_chunks
    assert head_dim_chunks(head_dim, split=True) == chunks
    assert head_dim_chunks(96) == (128, 0)  # the default: one chunk, zeros and all
    problem = Problem(1, 128, 128, 2, 2, head_dim, True, torch.bfloat16, "cpu")
    if head_dim == 96:
        assert get(variant).make_blocks(problem, dict(head_dim_split=True)).head_dim_split
    else:
        with pytest.raises(ValueError, match=f"head_dim_split=true: changes nothing at head dim {head_dim}"):
            get(variant).make_blocks(problem, dict(head_dim_split=True))
    assert not get(variant).make_blocks(problem, dict(head_dim_split=False)).head_dim_split


def test_head_dim_split_at_d128_is_one_config_error_line_for_the_sweep(tmp_path):
    """The rule is the variant's (make_blocks): the sweep stops with it (a multirun: an `unsupported` row), and the
    tuner's dead-config filter (schema.check) drops such a config before a trial."""
    proc = subprocess.run([sys.executable, "-m", "runners.sweep", "variant=ws_two_pass", "head_dim=128",
                           "blocks.head_dim_split=true", f"results_dir={tmp_path}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "config error: blocks.head_dim_split=true: changes nothing at head dim 128" in proc.stderr


@pytest.mark.parametrize("variant, blocks", [("ws", "{'head_dim_split': True}"),
                                             ("ws", "{'head_dim_split': True, 'swap_ab': False, 'num_stages': 2}"),
                                             ("ws_two_pass", "{'head_dim_split': True}")],
                         ids=["ws", "ws-mn", "ws_two_pass"])
def test_head_dim_split_compiles_for_sm90(variant, blocks):
    """D96 causal with the split: every Gluon kernel compiles within shared memory (the tiles stay 128 wide, so the
    same bytes as without it); spills: the compile table in docs/ws.md (Triton 3.6: none)."""
    rows = compiled_rows(96, True, blocks, variant=variant, kernels=("_ws_backward_kernel", "_ws_dq_kernel"))
    assert {row["kernel"] for row in rows} == ({"_ws_backward_kernel", "_ws_dq_kernel"} if variant == "ws_two_pass"
                                               else {"_ws_backward_kernel"}), rows
    for row in rows:
        assert row["status"] == "ok" and int(row["smem_bytes"]) <= MAX_SMEM, row


SPLIT_D96 = [("ws", {}), ("ws", dict(persistent=True)), ("ws", dict(swap_ab=False, num_stages=2)),
             ("ws", dict(warp_specialize=False)), ("ws", dict(deterministic=True)), ("ws_two_pass", {})]
SPLIT_D96_IDS = ["ws", "ws-persistent", "ws-mn", "ws-one-partition", "ws-deterministic", "ws_two_pass"]


SPLIT_SHAPES = {"nq<nk-gqa": (2, 200, 333, 4, 2), "nq>nk-mqa": (1, 333, 200, 4, 1), "two-batches": (2, 1000, 1000, 2, 2)}
SPLIT_FAST = {("nq<nk-gqa", True, torch.bfloat16), ("nq>nk-mqa", False, torch.float16)}  # the rest: -m slow
SPLIT_CASES = [pytest.param(shape, causal, dtype, id=f"{shape}-{'causal' if causal else 'full'}-{str(dtype)[6:]}",
                            marks=() if (shape, causal, dtype) in SPLIT_FAST else pytest.mark.slow)
               for shape in SPLIT_SHAPES for causal in (False, True) for dtype in (torch.float16, torch.bfloat16)]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("variant, blocks", SPLIT_D96, ids=SPLIT_D96_IDS)
@pytest.mark.parametrize("shape, causal, dtype", SPLIT_CASES)
def test_head_dim_split_matches_reference_on_hopper(variant, blocks, shape, causal, dtype):
    torch.manual_seed(hash((shape, causal, variant)) % 2**31)
    run_and_check(variant, *make_inputs((*SPLIT_SHAPES[shape], 96), dtype, "cuda"), causal,
                  blocks=dict(blocks, head_dim_split=True))


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("packing", list(WS_PACKINGS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant, blocks", [("ws", {}), ("ws", dict(deterministic=True)), ("ws_two_pass", {})],
                         ids=["ws", "ws-deterministic", "ws_two_pass"])
def test_head_dim_split_with_packed_documents_on_hopper(variant, blocks, causal, packing):
    from tests.test_varlen import packed_inputs, run_and_check_packed
    torch.manual_seed(hash((variant, packing, causal)) % 2**31)
    lens_q, lens_k, heads, kv_heads = WS_PACKINGS[packing]
    dtype = torch.float16 if causal else torch.bfloat16
    run_and_check_packed(variant, *packed_inputs(lens_q, lens_k, heads, kv_heads, 96, dtype, "cuda"), causal,
                         blocks=dict(blocks, head_dim_split=True))


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
def test_head_dim_split_at_d128_is_one_clear_line_on_hopper():
    with pytest.raises(ValueError, match="head_dim_split=true: changes nothing at head dim 128"):
        run_and_check("ws", *make_inputs((1, 128, 128, 2, 2, 128), torch.bfloat16, "cuda"), False,
                      blocks=dict(head_dim_split=True))


# Issue 43, group_split: a GQA group's query heads over group_split programs per key block, dK / dV as fp32
# partials the host adds. The index algebra on the CPU (the kernel's walk: query head i_hk * group + j of its kv
# head i_hk), the kernel against the reference on the GPU: GQA 4:1 and 8:1, MQA, tails, Nq != Nk, causal, packed,
# persistent, swap AB, a window, MLA's head dims.
@pytest.mark.parametrize("dtype, partial_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float32),
                                                   (torch.float16, torch.float16)])
def test_group_split_slices_add_up_to_each_kv_heads_gradient(dtype, partial_dtype, device):
    """Per query head gradient contributions g [B, N, H, D] summed by the tiles' kv heads (query head h in tile kv
    head h // (H / (Hkv * s)), as the kernel walks them: i_hk * group + j), then kernels.partials.add_partials (the
    Triton kernel; the interpreter here): the sums by the real kv head h // (H / Hkv). An odd D and rows past a
    block test the masks; the output starts poisoned."""
    from kernels.partials import add_partials
    batch, seq, heads, kv_heads, dim = 2, 37, 8, 2, 24
    per_query_head = torch.randn(batch, seq, heads, dim, dtype=torch.float64)
    expected = per_query_head.unflatten(2, (kv_heads, -1)).sum(3)
    for split in (2, 4):
        tiles = per_query_head.unflatten(2, (kv_heads * split, -1)).sum(3).to(partial_dtype)  # the kernel's
        out = add_partials(tiles.to(device).contiguous(), split, dtype).cpu()
        assert out.shape == (batch, seq, kv_heads, dim) and out.dtype == dtype
        loose = torch.float16 in (dtype, partial_dtype)
        torch.testing.assert_close(out.double(), expected, rtol=3e-3 if loose else 1e-5, atol=1e-2 if loose else 1e-5)


@pytest.mark.parametrize("heads, kv_heads, split", [(8, 2, 3), (8, 8, 2), (4, 2, 8)])
def test_group_split_that_does_not_divide_the_group_is_one_line(heads, kv_heads, split):
    problem = Problem(1, 128, 128, heads, kv_heads, 64, True, torch.bfloat16, "cuda")
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING is not None:
        pytest.skip(GLUON_MISSING)
    with pytest.raises(ValueError, match="must divide the GQA group") as err:
        get("ws").make_blocks(problem, dict(group_split=split))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="needs deterministic=false"):
        WsBlocks.from_dict(dict(group_split=2, deterministic=True))


@pytest.mark.parametrize("heads, kv_heads, causal, head_dim, split", [
    (32, 4, True, 64, 4), (24, 2, True, 64, 4), (40, 4, True, 64, 2), (32, 4, False, 64, 1), (16, 4, True, 64, 4),
    (16, 8, True, 64, 1), (32, 8, True, 128, 2), (20, 4, True, 128, 1), (32, 8, False, 128, 1), (8, 8, True, 128, 1),
    (32, 4, True, 128, 4), (16, 2, True, 128, 4), (40, 4, True, 128, 2), (24, 4, True, 128, 2), (32, 4, False, 128, 1)])
def test_group_split_default_rule_takes_a_split_that_divides_the_group(heads, kv_heads, causal, head_dim, split):
    """conf/block_defaults.yaml: causal GQA with groups of >= 4 query heads splits them over 4 programs at D64, 2 at
    D128 (4 from groups of 8); a group the split does not divide (10 at D64; 5 and 10 at D128) takes the gcd; other
    problems keep one program per kv head."""
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING is not None:
        pytest.skip(GLUON_MISSING)
    problem = Problem(2, 1024, 1024, heads, kv_heads, head_dim, causal, torch.bfloat16, "cuda")
    assert get("ws").make_blocks(problem).group_split == split


def test_deterministic_mode_overrides_a_default_group_split():
    """deterministic=true on a problem whose default rule splits GQA groups: the split yields (one program per kv
    head, no partials); both set explicitly is the one-line rule."""
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING is not None:
        pytest.skip(GLUON_MISSING)
    problem = Problem(2, 1024, 1024, 8, 2, 64, True, torch.bfloat16, "cuda")
    assert get("ws").make_blocks(problem).group_split == 4
    blocks = get("ws").make_blocks(problem, dict(deterministic=True))
    assert blocks.deterministic and blocks.group_split == 1
    with pytest.raises(ValueError, match="needs deterministic=false"):
        get("ws").make_blocks(problem, dict(deterministic=True, group_split=2))


@pytest.mark.parametrize("head_dim, kv_heads, split", [(64, 4, 4), (128, 8, 2), (128, 4, 4)])
def test_group_split_defaults_compile_within_the_spill_bounds(head_dim, kv_heads, split):
    """The causal GQA defaults (H32: group_split 4 at D64, 2 at D128 / Hkv8, 4 at D128 / Hkv4, 16-bit partials) and
    the adding pass compile for sm90 with no more spilled bytes than the unsplit kernel's bound (the split changes the
    K / V head index and, with fp32 partials only, the epilogue)."""
    rows = compiled_rows(head_dim, True, kernels=("_ws_backward_kernel", "_add_partials_kernel"), heads=32,
                         kv_heads=kv_heads)
    assert [row["kernel"] for row in rows] == ["_ws_backward_kernel", "_add_partials_kernel"], rows
    assert f'"group_split":{split}' in rows[0]["blocks"], rows[0]["blocks"]
    for row, bound in zip(rows, (SPILL_BOUND[("ws", head_dim, True)], 0)):
        assert row["status"] == "ok" and max(int(row["spill_store_bytes"]), int(row["spill_load_bytes"])) <= bound, row


def test_group_split_workspace_counts_the_partials():
    problem = Problem(2, 256, 256, 8, 2, 64, True, torch.bfloat16, "cuda")
    ws = get("ws")
    one, two = (ws.workspace_bytes(problem, WsBlocks.from_dict(dict(group_split=s))) for s in (1, 2))
    assert two - one == 4 * 2 * 256 * 2 * 2 * 128  # dK, dV fp32 partials: B Nk Hkv s (D + Dv)
    half = ws.workspace_bytes(problem, WsBlocks.from_dict(dict(group_split=2, fp32_partials=False)))
    assert half - one == 2 * 2 * 256 * 2 * 2 * 128  # in bf16


GROUP_SPLIT_CASES = [((2, 333, 333, 8, 2, 64), True, dict(group_split=2)),
                     ((2, 333, 333, 8, 2, 64), True, dict(group_split=4)),
                     ((1, 200, 461, 8, 1, 128), True, dict(group_split=8)),
                     ((1, 461, 200, 8, 1, 64), False, dict(group_split=2)),
                     ((2, 256, 256, 4, 1, 128), False, dict(group_split=4, swap_ab=True, BLOCK_M=64)),
                     ((2, 333, 333, 8, 2, 128), True, dict(group_split=2, persistent=True)),
                     ((2, 333, 333, 8, 2, 64), True, dict(group_split=4, swap_ab=False, BLOCK_M=128)),
                     ((2, 333, 333, 8, 2, 64), True, dict(group_split=4, fp32_partials=False)),
                     ((1, 200, 461, 8, 2, 128), True, dict(group_split=2, fp32_partials=False, persistent=True)),
                     ((1, 461, 200, 8, 1, 128), False, dict(group_split=8, fp32_partials=False)),
                     ((2, 333, 333, 16, 2, 128), True, dict(group_split=4, fp32_partials=False, scheduled_chunks=True))]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("shape, causal, blocks", GROUP_SPLIT_CASES,
                         ids=[f"{shape_id(s, c)}-{'-'.join(f'{k}{v}' for k, v in b.items())}"
                              for s, c, b in GROUP_SPLIT_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_group_split_matches_reference_on_hopper(shape, causal, blocks, dtype):
    torch.manual_seed(hash((shape, causal, tuple(blocks.items()))) % 2**31)
    run_and_check("ws", *make_inputs(shape, dtype, "cuda"), causal, blocks=blocks)


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_group_split_with_packed_documents_and_a_window_on_hopper(causal):
    from tests.test_modifiers import check_against_reference
    from tests.test_varlen import packed_inputs, run_and_check_packed
    torch.manual_seed(7 + causal)
    run_and_check_packed("ws", *packed_inputs([170, 1, 333, 64], None, 8, 2, 64, torch.bfloat16, "cuda"), causal,
                         blocks=dict(group_split=2))
    q, k, v, do = make_inputs((1, 333, 333, 8, 2, 128), torch.bfloat16, "cuda")
    check_against_reference("ws", q, k, v, do, None, causal, (40, 0 if causal else 30), 0.0,
                            blocks=dict(group_split=4))


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("fp32_partials", [True, False], ids=["fp32-partials", "16-bit-partials"])
@pytest.mark.parametrize("shape, split", [((2, 333, 333, 8, 2, 128, 64), 2), ((1, 200, 461, 8, 1, 64, 128), 4)],
                         ids=["D128-Dv64", "D64-Dv128"])
def test_group_split_with_a_value_head_dim_and_a_sink_on_hopper(shape, split, fp32_partials):
    """group_split's partials of V's head dim (dV [B, Nk, Hkv * s, Dv]) and the sink's gradient beside them."""
    from tests.test_mla_sinks import check, make_case
    q, k, v, do, sink = make_case(*shape, dtype=torch.bfloat16, seed=3)
    check("ws", q, k, v, do, sink, True, blocks=dict(group_split=split, fp32_partials=fp32_partials))
