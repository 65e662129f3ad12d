"""The Gluon forward (kernels/gluon/forward.py, issue 42): compiled for sm90 on any machine (CPU: Triton's bundled
ptxas, through runners.compile's compiler), run against the fp32 reference on an sm90 GPU (O and the base-2 LSE,
fresh random inputs, NaN-poisoned outputs), and refused with a reason everywhere else."""
import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from kernels.forward_choice import FORWARDS, check_forward, chosen_forward
from variants.reference import reference_forward, visible_pairs

ON_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
MAX_SMEM = 227 * 1024
LSE_TOLERANCE = 1e-3  # base-2 LSE: fp32 statistics of fp16 / bf16 scores
LOG2E = 1.4426950408889634


def reference_lse(q, k, causal: bool, scale: float, mods=None) -> torch.Tensor:
    """[B, H, Nq] fp32: log2 sum_j exp(scale q.k_j) over the visible keys (mods: a window and softcap,
    variants.problem.Modifiers), +inf for a row that sees none (kernels/forward.py's convention)."""
    heads, kv_heads = q.shape[2], k.shape[2]
    q_ = q.float().transpose(1, 2)  # [B, H, Nq, D]
    k_ = k.float().transpose(1, 2).repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.matmul(q_, k_.transpose(-1, -2)) * scale  # [B, H, Nq, Nk]
    if mods is not None and mods.softcap > 0:
        scores = mods.softcap * torch.tanh(scores / mods.softcap)
    window = None if mods is None else (mods.window_left, mods.window_right)
    visible = visible_pairs(q.shape[1], k.shape[1], causal, window, q.device)
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1) / math.log(2.0)
    return torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)


# (batch, Nq, Nk, heads, kv_heads, head dim, causal): odd lengths, tails, Nq != Nk both ways, GQA, MQA
CASES = [
    (2, 128, 128, 2, 2, 64, False),
    (2, 127, 129, 4, 2, 64, True),
    (1, 300, 200, 4, 1, 64, True),  # Nq > Nk: the first 100 queries see no key (O = 0, LSE = +inf)
    (3, 200, 333, 4, 4, 128, False),
    (2, 65, 1000, 8, 2, 128, True),
    (1, 1, 77, 2, 1, 128, False),
    (2, 513, 513, 2, 2, 128, True),
    (1, 190, 260, 2, 2, 96, True),
    (1, 130, 70, 2, 1, 192, False),
    (1, 200, 200, 2, 2, 256, True),
]


def case_id(case) -> str:
    batch, seq_q, seq_k, heads, kv_heads, head_dim, causal = case
    return f"B{batch}-Nq{seq_q}-Nk{seq_k}-H{heads}-HKV{kv_heads}-D{head_dim}-{'causal' if causal else 'full'}"


# the structural variants beside the default (kernels/gluon/forward_variants.py); pp3 and pp2_serial_n256: D <= 64 only
NEW_VARIANTS = ("ws2", "pp2", "pp2_serial", "pp3", "pp2_serial_n256", "pp2_lazy", "pp3_lazy", "pp2_lazy_split",
                "pp3_split", "pp2_lazy_lpt", "pp3_lpt", "pp2_lazy_persistent", "pp3_persistent", "pp3_persistent_dsum")
D64_ONLY = ("pp3", "pp2_serial_n256", "pp3_lazy", "pp3_split", "pp3_lpt", "pp3_persistent", "pp3_persistent_dsum")
LONG_CASES = [(1, 384, 2048, 2, 1, 64, False), (1, 1024, 1024, 2, 2, 128, True)]  # many laps of the ring and turns
VARIANT_CASES = [(name, case) for name in NEW_VARIANTS for case in CASES + LONG_CASES
                 if name not in D64_ONLY or case[5] <= 64]


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon forward needs an sm90 GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_matches_the_fp32_reference(case, dtype):
    check_against_the_reference(case, dtype, None)


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon forward needs an sm90 GPU")
@pytest.mark.parametrize("name, case", VARIANT_CASES, ids=[f"{n}-{case_id(c)}" for n, c in VARIANT_CASES])
def test_variants_match_the_fp32_reference(name, case):
    """Each structural variant (consumer partitions, ping-pong, no overlap, 192 rows, 256 keys) on the same cases: odd
    lengths, tails, Nq != Nk, rows without keys, GQA / MQA, causal."""
    from kernels.gluon.forward_variants import variant_blocks
    blocks = variant_blocks(name, case[5], case[6])
    assert blocks is not None and blocks.consumers > 0
    check_against_the_reference(case, torch.bfloat16, blocks)


# (variant, case, (window left, window right, softcap)): windows whose edges cut key blocks on both sides, start the
# walk past key block 0 and leave some rows without a key (Nq > Nk, a narrow window), softcap alone and with a window;
# every preferred structure (pp3_persistent_dsum / pp3_persistent, pp2_lazy_lpt, pp2_lazy_persistent) and mono
MODIFIER_CASES = [
    ("pp3_persistent_dsum", (2, 700, 700, 4, 2, 64, True), (200, -1, 0.0)),
    ("pp3_persistent_dsum", (1, 300, 333, 2, 1, 64, True), (-1, -1, 30.0)),
    ("pp3_persistent", (2, 500, 611, 2, 2, 64, False), (130, 70, 0.0)),
    ("pp3_persistent", (1, 900, 300, 2, 1, 64, False), (40, 0, 15.0)),  # Nq > Nk: the first queries see no key
    ("pp2_lazy_lpt", (2, 640, 640, 2, 1, 128, False), (256, 256, 0.0)),
    ("pp2_lazy_lpt", (1, 333, 1000, 4, 4, 128, True), (300, -1, 20.0)),
    ("pp2_lazy_persistent", (3, 451, 451, 3, 1, 128, True), (65, -1, 0.0)),
    ("pp2_lazy_persistent", (1, 257, 300, 2, 2, 96, False), (-1, 5, 50.0)),
    ("mono", (1, 300, 260, 2, 2, 256, True), (100, -1, 10.0)),
    ("mono", (1, 200, 350, 2, 1, 192, False), (30, 60, 0.0)),
]


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon forward needs an sm90 GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name, case, mods", MODIFIER_CASES,
                         ids=[f"{n}-{case_id(c)}-w{m[0]}_{m[1]}-cap{m[2]:g}" for n, c, m in MODIFIER_CASES])
def test_window_and_softcap_match_the_fp32_reference(name, case, mods, dtype):
    """A sliding window (bottom-right aligned, both edges) and softcap in every Gluon forward structure: O and the
    LSE against the fp32 reference with the same modifiers, and within 2x the stock forward's error."""
    from kernels.gluon.forward_variants import variant_blocks
    from variants.problem import Modifiers
    blocks = variant_blocks(name, case[5], case[6])
    assert blocks is not None
    check_against_the_reference(case, dtype, blocks, Modifiers(*mods))


# (variant, head dim, causal, (query lengths), (key lengths), (window left, right, softcap)): packed documents with
# empty ones, one-token ones, tails, Nq != Nk per document (rows without keys under causal), GQA 2:1; every preferred
# structure (persistent and lpt are off for a packed batch) and mono; a window and softcap on packed documents
PACKED_CASES = [
    ("pp3_persistent_dsum", 64, True, (130, 0, 1, 257, 64), (130, 5, 1, 200, 300), None),
    ("pp3_persistent", 64, False, (77, 300, 129), (77, 128, 400), None),
    ("pp2_lazy_lpt", 128, True, (513, 2, 190), (513, 70, 190), (100, -1, 0.0)),
    ("pp2_lazy_persistent", 128, False, (64, 1000, 3), (64, 999, 3), (-1, -1, 20.0)),
    ("pp2_lazy_persistent", 96, True, (300, 45), (320, 45), None),
    ("mono", 256, True, (200, 61), (150, 61), None),
]


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon forward needs an sm90 GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name, head_dim, causal, lens_q, lens_k, mods", PACKED_CASES,
                         ids=[f"{c[0]}-D{c[1]}-{'causal' if c[2] else 'full'}-{len(c[3])}docs{'-mods' if c[5] else ''}"
                              for c in PACKED_CASES])
def test_packed_documents_match_the_fp32_reference(name, head_dim, causal, lens_q, lens_k, mods, dtype):
    """Packed documents (kernels.varlen.Packing, q [1, total_q, H, D]): each document's O and LSE rows against the
    fp32 reference of that document alone, on NaN-poisoned outputs (a row written twice or never shows), and O within
    2x the stock forward's error on the packed batch."""
    from kernels.forward import attention_forward
    from kernels.gluon.forward import gluon_attention_forward
    from kernels.gluon.forward_variants import variant_blocks
    from kernels.varlen import Packing
    from variants.accuracy import REL_TOL, error
    from variants.problem import Modifiers
    heads, kv_heads, scale = 4, 2, head_dim ** -0.5
    mods = Modifiers(*mods) if mods else None
    cu_q, cu_k = (torch.tensor([0, *lens], device="cuda").cumsum(0).to(torch.int32) for lens in (lens_q, lens_k))
    packing = Packing(cu_q, cu_k)
    generator = torch.Generator(device="cuda").manual_seed(sum(lens_q) * 7 + head_dim)
    q = torch.randn(1, sum(lens_q), heads, head_dim, device="cuda", dtype=dtype, generator=generator)
    k, v = (torch.randn(1, sum(lens_k), kv_heads, head_dim, device="cuda", dtype=dtype, generator=generator)
            for _ in range(2))
    o, lse = gluon_attention_forward(q, k, v, causal, scale, variant_blocks(name, head_dim, causal), mods, packing)
    torch.cuda.synchronize()
    assert o.shape == q.shape and lse.shape == (1, heads, sum(lens_q))
    assert not o.isnan().any() and not lse.isnan().any(), "unwritten (NaN) rows"
    window = None if mods is None else (mods.window_left, mods.window_right)
    o_ref, lse_ref = torch.empty_like(o, dtype=torch.float32), torch.empty_like(lse)
    for d in range(len(lens_q)):
        qs, ks = slice(int(cu_q[d]), int(cu_q[d + 1])), slice(int(cu_k[d]), int(cu_k[d + 1]))
        if qs.stop == qs.start:
            continue
        o_ref[:, qs] = reference_forward(q[:, qs], k[:, ks], v[:, ks], causal, scale, window_size=window,
                                         softcap=0.0 if mods is None else mods.softcap)
        lse_ref[..., qs] = reference_lse(q[:, qs], k[:, ks], causal, scale, mods)
    err = error(o, o_ref)
    stock = error(attention_forward(q, k, v, causal, scale, varlen=packing, mods=mods)[0], o_ref)
    assert err.ok(dtype), f"rel err {err.rel:.2e} > {REL_TOL[dtype]:.0e} (max abs {err.max_abs:.2e})"
    assert err.rel <= 2 * stock.rel + 1e-4, f"rel err {err.rel:.2e}, the stock forward's {stock.rel:.2e}"
    assert torch.equal(torch.isinf(lse), torch.isinf(lse_ref)), "rows without keys must get LSE = +inf"
    finite = torch.isfinite(lse_ref)
    assert (lse[finite] - lse_ref[finite]).abs().max().item() <= LSE_TOLERANCE


# (variant, head dim, causal, dtype): the lazy rescale on scores whose row max jumps by more than 2^8 in some key
# blocks and rows, and creeps up in others (both sides of the `moved` branch, and P up to 256 in fp16)
LAZY_CASES = [("pp2_lazy", 64, False, torch.bfloat16), ("pp2_lazy", 128, True, torch.float16),
              ("pp2_lazy_split", 128, True, torch.bfloat16),
              ("pp3_lazy", 64, True, torch.bfloat16), ("pp3_lazy", 64, False, torch.float16)]


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon forward needs an sm90 GPU")
@pytest.mark.parametrize("name, head_dim, causal, dtype", LAZY_CASES,
                         ids=[f"{n}-D{d}-{'causal' if c else 'full'}-{str(t)[6:]}" for n, d, c, t in LAZY_CASES])
def test_variants_lazy_rescale_on_growing_maxima(name, head_dim, causal, dtype):
    """Query row i's first channel is 16 i / Nq, key j's a step of its key block (0, 0, 8, 8.5, 16, 16.2): the
    later rows' max jumps by 23 (log2) at block 2 and 4 and creeps up in between; the first rows' barely moves."""
    from kernels.gluon.forward_variants import variant_blocks
    blocks = variant_blocks(name, head_dim, causal)
    assert blocks is not None and blocks.lazy_rescale and blocks.BLOCK_N == 128
    seq_q, seq_k, scale = 320, 700, head_dim ** -0.5
    generator = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(1, seq_q, 2, head_dim, device="cuda", generator=generator)
    k, v = (torch.randn(1, seq_k, 1, head_dim, device="cuda", generator=generator) for _ in range(2))
    q[..., 0] = torch.linspace(0.0, 16.0, seq_q, device="cuda")[:, None]
    steps = torch.tensor([0.0, 0.0, 8.0, 8.5, 16.0, 16.2], device="cuda")
    k[..., 0] = steps[torch.arange(seq_k, device="cuda") // 128][:, None]
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scores = torch.matmul(q[0, :, 0].float(), k[0, :, 0].float().T) * scale * LOG2E  # [Nq, Nk], head 0
    visible = visible_pairs(seq_q, seq_k, causal, None, q.device)
    if visible is not None:
        scores = scores.masked_fill(~visible.reshape(seq_q, seq_k), float("-inf"))
    block_max = torch.nn.functional.pad(scores, (0, 768 - seq_k), value=float("-inf")).reshape(seq_q, 6, 128)
    running = block_max.amax(2).cummax(1).values  # [Nq, 6] the eager max after each key block
    grow = (running[:, 1:] - running[:, :-1]).nan_to_num(0.0)  # -inf - -inf: no key yet
    assert (grow > 8).any() and ((grow > 0) & (grow <= 8)).any(), "the inputs must take both sides of the branch"
    assert_matches_the_reference(q, k, v, causal, scale, blocks)


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon forward needs an sm90 GPU")
@pytest.mark.parametrize("chunk", [2, 3, 5, 9])
@pytest.mark.parametrize("name, head_dim", [("pp2_lazy_lpt", 128), ("pp3_lpt", 64)])
def test_lpt_chunks_cover_every_block(monkeypatch, name, head_dim, chunk):
    """FwdBlocks.lpt's numbering with chunks of 2, 3, 5 and 9 of the 9 (batch, head) pairs (the last chunk short,
    or one chunk): every query block of every head written once, on poisoned outputs, odd lengths, GQA."""
    import kernels.gluon.forward as forward
    from kernels.gluon.forward_variants import variant_blocks
    chosen = []
    monkeypatch.setattr(forward, "forward_chunk_heads", lambda *args: chosen.append(chunk) or chunk)
    blocks = variant_blocks(name, head_dim, True)
    assert blocks.lpt
    check_against_the_reference((3, 451, 451, 3, 1, head_dim, True), torch.bfloat16, blocks)
    assert chosen, "the forced chunk was never asked for"


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon forward needs an sm90 GPU")
@pytest.mark.parametrize("programs", [1, 4, 7])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name, head_dim", [("pp2_lazy_persistent", 128), ("pp2_lazy_persistent", 64),
                                            ("pp3_persistent", 64)])
def test_persistent_programs_walk_many_tiles(monkeypatch, programs, causal, name, head_dim):
    """FwdBlocks.persistent with 1, 4 and 7 programs for the 27-36 tiles of 9 (batch, head) pairs (odd lengths,
    GQA): each program walks many tiles, so the ring's blocks, the turns and Q's phases count on across tiles; every
    query block written once, on poisoned outputs."""
    import kernels.gluon.chunks as chunks
    from kernels.gluon.forward_variants import variant_blocks
    blocks = variant_blocks(name, head_dim, causal)
    assert blocks.persistent
    chunks.forward_schedule.cache_clear()
    monkeypatch.setattr(chunks, "sm_count", lambda device: programs)
    try:
        check_against_the_reference((3, 451, 451, 3, 1, head_dim, causal), torch.bfloat16, blocks)
    finally:
        chunks.forward_schedule.cache_clear()


def test_the_variant_cases_are_the_registrys():
    """VARIANT_CASES leaves out exactly the cells where forward_variants has no tile (D64_ONLY past tile D 64)."""
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING is not None:
        pytest.skip(GLUON_MISSING)
    from kernels.gluon.forward_variants import FORWARD_VARIANTS, variant_blocks
    assert set(NEW_VARIANTS) == set(FORWARD_VARIANTS) - {"mono"}
    expected = [(n, c) for n in NEW_VARIANTS for c in CASES + LONG_CASES if variant_blocks(n, c[5], c[6]) is not None]
    assert VARIANT_CASES == expected


@pytest.mark.parametrize("blocks, message", [
    ({"consumers": 2, "BLOCK_M": 192, "num_warps": 4}, "BLOCK_M = 64 x consumers"),
    ({"consumers": 2, "BLOCK_M": 128, "num_warps": 8}, "num_warps = 4"),
    ({"consumers": 1, "BLOCK_M": 64, "num_warps": 4, "pingpong": True}, "at least 2 consumers"),
    ({"pingpong": True}, "need consumers > 0"),
    ({"overlap": False}, "need consumers > 0"),
    ({"lazy_rescale": True}, "need consumers > 0"),
    ({"persistent": True}, "need consumers > 0"),
    ({"deferred_sum": True}, "need consumers > 0"),
])
def test_bad_variant_tiles_are_refused_in_one_line(blocks, message):
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING is not None:
        pytest.skip(GLUON_MISSING)
    from kernels.gluon.forward import FwdBlocks, check_forward_blocks
    with pytest.raises(ValueError, match=message):
        check_forward_blocks(FwdBlocks(128, 128, 8, 2)._replace(**blocks))


def check_against_the_reference(case, dtype, blocks, mods=None):
    """The Gluon forward at `blocks` (None: the default tile; mods: a window / softcap) against the fp32 reference: O
    within the accuracy gate and within 2x the stock forward's error, the base-2 LSE within LSE_TOLERANCE, +inf where
    a row sees no key."""
    batch, seq_q, seq_k, heads, kv_heads, head_dim, causal = case
    generator = torch.Generator(device="cuda").manual_seed(hash(case) % 2**31)
    q = torch.randn(batch, seq_q, heads, head_dim, device="cuda", dtype=dtype, generator=generator)
    k, v = (torch.randn(batch, seq_k, kv_heads, head_dim, device="cuda", dtype=dtype, generator=generator)
            for _ in range(2))
    assert_matches_the_reference(q, k, v, causal, head_dim ** -0.5, blocks, mods)


def assert_matches_the_reference(q, k, v, causal: bool, scale: float, blocks, mods=None):
    """check_against_the_reference's checks on given inputs q [B, Nq, H, D], k / v [B, Nk, Hkv, D]; mods: a window
    and softcap (variants.problem.Modifiers) or None."""
    from kernels.forward import attention_forward
    from kernels.gluon.forward import gluon_attention_forward
    from variants.accuracy import REL_TOL, error
    dtype = q.dtype
    o, lse = gluon_attention_forward(q, k, v, causal, scale, blocks, mods)  # o, lse from the poisoned torch.empty
    torch.cuda.synchronize()
    window = None if mods is None else (mods.window_left, mods.window_right)
    o_ref = reference_forward(q, k, v, causal, scale, window_size=window, softcap=0.0 if mods is None else mods.softcap)
    lse_ref = reference_lse(q, k, causal, scale, mods)
    assert not o.isnan().any(), "O has unwritten (NaN) elements"
    err, stock = error(o, o_ref), error(attention_forward(q, k, v, causal, scale, mods=mods)[0], o_ref)
    assert err.ok(dtype), f"rel err {err.rel:.2e} > {REL_TOL[dtype]:.0e} (max abs {err.max_abs:.2e})"
    assert err.rel <= 2 * stock.rel + 1e-4, f"rel err {err.rel:.2e}, the stock forward's {stock.rel:.2e}"
    assert not lse.isnan().any(), "LSE has unwritten (NaN) elements"
    assert torch.equal(torch.isinf(lse), torch.isinf(lse_ref)), "rows without keys must get LSE = +inf"
    finite = torch.isfinite(lse_ref)
    assert (lse[finite] - lse_ref[finite]).abs().max().item() <= LSE_TOLERANCE


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon forward needs an sm90 GPU")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_same_outputs_as_the_stock_forward(causal):
    """The convention the backward designs read: the Gluon forward's O and LSE agree with kernels/forward.py's."""
    from kernels.forward import attention_forward
    from kernels.gluon.forward import gluon_attention_forward
    q = torch.randn(2, 257, 4, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 300, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o, lse = gluon_attention_forward(q, k, v, causal, 0.1)
    o_stock, lse_stock = attention_forward(q, k, v, causal, 0.1)
    assert (o.float() - o_stock.float()).abs().max().item() <= 2e-2
    assert (lse - lse_stock).abs().max().item() <= 1e-3


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon forward needs an sm90 GPU")
@pytest.mark.parametrize("variant", ["ws", "two_pass"])
def test_a_backward_reads_the_gluon_forward(variant):
    """prepare(..., forward='gluon'): the design's gradients from the Gluon forward's O and LSE pass the accuracy gate
    the runner uses."""
    from runners.point.measure import check_accuracy
    from variants import get
    q = torch.randn(2, 200, 4, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 333, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    impl = get(variant)
    from variants.problem import Problem
    blocks = impl.make_blocks(Problem(2, 200, 333, 4, 2, 128, True, torch.bfloat16, "cuda"))
    grads = impl.prepare(q, k, v, do, True, 128 ** -0.5, blocks, forward="gluon")()
    row = check_accuracy(grads, q, k, v, do, True, 128 ** -0.5, torch.bfloat16)
    assert row["correct"], row["_wrong_reason"]


@pytest.mark.parametrize("head_dim, causal, seq_k, name", [
    (32, True, 1024, "pp3_persistent_dsum"), (64, True, 4096, "pp3_persistent_dsum"),
    (64, False, 16384, "pp3_persistent"),
    (96, False, 2048, "pp2_lazy_persistent"), (96, False, 4096, "pp2_lazy_lpt"), (96, True, 4096, "pp2_lazy_persistent"),
    (128, False, 4095, "pp2_lazy_persistent"), (128, True, 16383, "pp2_lazy_persistent"),
    (128, True, 16384, "pp2_lazy_lpt"), (128, False, 16384, "pp2_lazy_lpt"),
    (192, True, 4096, "mono"), (256, False, 1024, "mono")])
def test_forward_gluon_runs_the_preferred_structure(head_dim, causal, seq_k, name):
    """forward=gluon / auto runs pp3_persistent at tile D <= 64 (with deferred_sum causal), pp2_lazy_persistent to
    D128 (pp2_lazy_lpt from 4096 keys non-causal, from 16384 causal) and mono past it (the measured winners), and
    those tiles are the variants' own, not a copy that could drift."""
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING is not None:
        pytest.skip(GLUON_MISSING)
    from kernels.gluon.forward_variants import preferred_blocks, variant_blocks
    blocks = preferred_blocks(head_dim, causal, seq_k)
    assert blocks == variant_blocks(name, head_dim, causal)
    assert (blocks.consumers > 0) == (name != "mono")
    assert blocks.lpt == name.endswith(("_lpt", "_persistent", "_persistent_dsum"))
    assert blocks.persistent == name.endswith(("_persistent", "_persistent_dsum"))
    assert blocks.deferred_sum == name.endswith("_dsum")


def test_the_choice_is_checked_and_auto_by_default():
    """auto by default: Gluon on sm90 where it covers the problem, stock elsewhere (the baselines' forwards after
    the three: tests/test_forward_baselines.py)."""
    from kernels.forward_choice import DEFAULT_FORWARD
    assert DEFAULT_FORWARD == "auto" and FORWARDS[:3] == ("stock", "gluon", "auto")
    with pytest.raises(ValueError, match="forward='fast': one of stock, gluon, auto, "):
        check_forward("fast")


@pytest.mark.parametrize("dtype, head_dim, extra, reason", [
    (torch.float32, 64, {}, "fp16 and bf16"),
    (torch.bfloat16, 80, {}, "head dims"),
    (torch.bfloat16, 64, {"gate": object()}, "forget gate"),
])
def test_uncovered_problems_run_the_stock_forward_with_the_reason(dtype, head_dim, extra, reason):
    q = torch.zeros(1, 8, 2, head_dim, dtype=dtype)
    run = chosen_forward("auto", q, q, q, True, **extra)
    assert run.name == "stock" and reason in run.reason
    assert chosen_forward("stock", q, q, q, True) == ("stock", "")


def test_auto_runs_the_stock_forward_for_softcap_at_d64_only():
    """forward=auto's measured exception (kernels.forward_choice.auto_runs_stock): softcap at tile D <= 64 runs the
    stock forward; a window there, softcap at D96 / D128, and forward=gluon itself keep the Gluon forward."""
    from kernels.forward_choice import auto_runs_stock
    from variants.problem import Modifiers
    assert "softcap" in auto_runs_stock(64, Modifiers(softcap=30.0))
    assert "softcap" in auto_runs_stock(32, Modifiers(window_left=100, softcap=5.0))
    assert auto_runs_stock(64, Modifiers(window_left=100, window_right=3)) == ""
    assert auto_runs_stock(96, Modifiers(softcap=30.0)) == auto_runs_stock(128, Modifiers(softcap=30.0)) == ""
    assert auto_runs_stock(64, None) == ""
    if ON_HOPPER:
        q = torch.zeros(1, 8, 2, 64, device="cuda", dtype=torch.bfloat16)
        assert chosen_forward("auto", q, q, q, True, mods=Modifiers(softcap=30.0)).name == "stock"
        assert chosen_forward("gluon", q, q, q, True, mods=Modifiers(softcap=30.0)) == ("gluon", "")
        assert chosen_forward("auto", q, q, q, True, mods=Modifiers(window_left=4)) == ("gluon", "")


def test_a_value_head_dim_or_a_sink_runs_the_stock_forward():
    """Issue 47: the Gluon forward has neither a value head dim of its own nor a sink; both run stock, with the
    reason, before any of the Gluon checks (CPU tensors here)."""
    q = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    v = torch.zeros(1, 8, 2, 32, dtype=torch.bfloat16)
    for choice in ("gluon", "auto"):
        run = chosen_forward(choice, q, q, v, True)
        assert run.name == "stock" and "V's head dim" in run.reason
        run = chosen_forward(choice, q, q, q, True, sink=torch.zeros(2))
        assert run == ("stock", "the Gluon forward has no learnable sink yet")
    assert chosen_forward("stock", q, q, v, True, sink=torch.zeros(2)) == ("stock", "")


def test_a_cpu_tensor_runs_the_stock_forward():
    q = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    run = chosen_forward("gluon", q, q, q, False)
    if run.reason.startswith("Triton"):  # a Triton without the Gluon Hopper API
        pytest.skip(run.reason)
    assert run == ("stock", "the Gluon forward is a kernel for sm90 GPUs; this is a CPU tensor")


def test_a_gluon_variant_is_a_choice(monkeypatch):
    """forward=gluon.<variant> (kernels.gluon.forward_variants.FORWARD_VARIANTS) is checked like the other choices,
    refused as gluon is (a CPU tensor here), and, past those refusals, a D64-only variant runs stock beyond tile D 64;
    forward_ran names the variant that ran."""
    from kernels.gluon.forward_variants import FORWARD_VARIANTS
    for name in FORWARD_VARIANTS:
        assert check_forward(f"gluon.{name}") == f"gluon.{name}"
    for bad in ("gluon.fast", "gluon.", "stock.pp3", "gluon.pp3.lpt"):
        with pytest.raises(ValueError, match=f"forward={bad!r}: gluon.<variant>, the variant one of mono, "):
            check_forward(bad)
    q = torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16)
    run = chosen_forward("gluon.pp3_lpt", q, q, q, True)
    assert run.name == "stock" and run.reason
    import kernels.gluon.forward as gluon_forward
    monkeypatch.setattr(gluon_forward, "forward_reason", lambda *args, **kwargs: None)  # as if on sm90
    assert chosen_forward("gluon.pp3_lpt", q, q, q, True) == (
        "stock", "the Gluon forward variant pp3_lpt runs tile D <= 64 only, not head dim 128")
    assert chosen_forward("gluon.pp2_lazy_lpt", q, q, q, True) == ("gluon.pp2_lazy_lpt", "")
    assert chosen_forward("gluon.pp3_lpt", q[..., :64], q[..., :64], q[..., :64], True) == ("gluon.pp3_lpt", "")
    assert chosen_forward("gluon", q, q, q, True) == ("gluon", "")


# (head dim, causal, dtype) compiled for sm90 at the default tiles on any machine
# (head dim, causal, dtype, keys): each PREFERRED rule, masked and not, and mono past D128
COMPILE_CASES = [(64, False, "bf16", 4096), (64, True, "fp16", 1024), (128, False, "bf16", 1024),
                 (128, True, "fp16", 4096), (128, False, "bf16", 4096), (128, True, "bf16", 16384),
                 (96, True, "bf16", 2048), (192, False, "bf16", 4096), (256, True, "bf16", 4096)]


def skip_without_the_compiler() -> None:
    """Skips a test that compiles a Gluon kernel for sm90 where this Triton has no Gluon or no NVIDIA backend."""
    from kernels.gluon.compat import GLUON_MISSING
    if GLUON_MISSING is not None:
        pytest.skip(GLUON_MISSING)
    pytest.importorskip("triton.backends.nvidia.compiler", reason="no NVIDIA backend: nothing to compile with")


def compiler_json(code: str):
    """The JSON that `code` prints last, run in a fresh process with the compiler, not the interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1200)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def compiled_forward_rows(cases, blocks=None) -> list[dict]:
    """runners.compile.forward's rows (registers, spills, shared memory, status) for each case (blocks: a FwdBlocks
    field dict per case, else the default tiles), in a fresh process (the compiler, not the interpreter)."""
    blocks = blocks or [None] * len(cases)
    code = ("import json; from runners.compile.forward import check_forward_kernel; "
            f"print(json.dumps([check_forward_kernel(d, c, t, b) for (d, c, t), b in zip({cases!r}, {blocks!r})]))")
    return compiler_json(code)


def test_compiles_for_sm90_without_spills():
    skip_without_the_compiler()
    """The tiles forward=gluon / auto runs by default (preferred_blocks), each PREFERRED rule among them."""
    from kernels.gluon.forward_variants import PREFERRED, preferred_blocks, preferred_name
    assert {rule.name for rule in PREFERRED} | {"mono"} == {preferred_name(d, c, n) for d, c, _, n in COMPILE_CASES}
    blocks = [dict(preferred_blocks(d, c, n)._asdict()) for d, c, _, n in COMPILE_CASES]
    rows = compiled_forward_rows([case[:3] for case in COMPILE_CASES], blocks)
    for case, row in zip(COMPILE_CASES, rows):
        assert row["status"] == "ok", (case, row)
        assert row["smem_bytes"] <= MAX_SMEM, (case, row)
        assert row["spill_store_bytes"] == 0 and row["spill_load_bytes"] == 0, (case, row)


def test_window_and_softcap_compile_for_sm90():
    """The preferred tiles with a window (both edges) compile for sm90 without spills; with softcap they compile, and
    only pp3_persistent_dsum (causal D64: its 160-register consumers and the tanh's registers) spills: Triton 3.9
    72 B, 3.6 1120 B, one reason forward=auto runs the stock forward there (kernels.forward_choice.auto_runs_stock)."""
    skip_without_the_compiler()
    from kernels.gluon.forward_variants import preferred_blocks, preferred_name
    cells = [(d, c, n, mods) for d, c, _, n in COMPILE_CASES for mods in ((100, 20, 0.0), (-1, -1, 30.0))]
    code = ("import json; from runners.compile.forward import check_forward_kernel; "
            f"print(json.dumps([check_forward_kernel(d, c, 'bf16', b, window_softcap=m) for d, c, b, m in "
            f"{[(d, c, dict(preferred_blocks(d, c, n)._asdict()), m) for d, c, n, m in cells]!r}]))")
    for (d, c, n, mods), row in zip(cells, compiler_json(code)):
        assert row["status"] == "ok" and row["smem_bytes"] <= MAX_SMEM, (d, c, mods, row)
        spilled = row["spill_store_bytes"] + row["spill_load_bytes"]
        if mods[2] == 0.0 or preferred_name(d, c, n) != "pp3_persistent_dsum":
            assert spilled == 0, (d, c, mods, row)


def test_packed_documents_compile_for_sm90_without_spills():
    """The preferred tiles on a packed batch (persistent and lpt off: the (document, query block) pairs' order)."""
    skip_without_the_compiler()
    from kernels.gluon.forward_variants import preferred_blocks
    documents = ((100, 0, 257), (150, 3, 200))
    cells = [(d, c, dict(preferred_blocks(d, c, n)._asdict())) for d, c, _, n in COMPILE_CASES]
    code = ("import json; from runners.compile.forward import check_forward_kernel; "
            f"print(json.dumps([check_forward_kernel(d, c, 'bf16', b, documents={documents!r}) for d, c, b in "
            f"{cells!r}]))")
    for (d, c, blocks), row in zip(cells, compiler_json(code)):
        assert row["status"] == "ok" and row["smem_bytes"] <= MAX_SMEM, (d, c, row)
        assert row["spill_store_bytes"] == 0 and row["spill_load_bytes"] == 0, (d, c, row)


def test_variants_compile_for_sm90_without_spills():
    """Every structural variant at D64 and D128, causal and not (pp3, pp2_serial_n256: D64 only), in one process."""
    skip_without_the_compiler()
    from kernels.gluon.forward_variants import variant_blocks
    cells = [(name, d, c) for name in NEW_VARIANTS for d in (64, 128) for c in (False, True)
             if variant_blocks(name, d, c) is not None]
    rows = compiled_forward_rows([(d, c, "bf16") for _, d, c in cells],
                                 [dict(variant_blocks(*cell)._asdict()) for cell in cells])
    assert len(rows) == len(cells) and {name for name, _, _ in cells} == set(NEW_VARIANTS)  # every variant, once or more
    for cell, row in zip(cells, rows):
        assert row["status"] == "ok", (cell, row)
        assert row["smem_bytes"] <= MAX_SMEM, (cell, row)
        assert row["spill_store_bytes"] == 0 and row["spill_load_bytes"] == 0, (cell, row)


def test_deferred_sum_drops_the_per_block_row_sum_shuffles():
    """FwdBlocks.deferred_sum (the row sum in per-thread partials, reduced across its quad in the epilogue): the
    compiled sm90 kernel has 4 fewer shuffles per consumer (each thread's 2 rows, 2 butterfly steps, were in the
    key-block loop) than the same variant without it; the row max keeps its shuffles."""
    skip_without_the_compiler()
    cells = [("pp3_persistent", 64, 3), ("pp2_lazy_lpt", 128, 2)]  # (variant, head dim, consumers)
    code = ("import json, re; from runners.compile.forward import capture_forward_launch; "
            "from runners.compile.resources import compile_kernel; "
            "from kernels.gluon.forward_variants import variant_blocks; "
            "count = lambda name, d, dsum: len(re.findall(r'shfl\\.sync', compile_kernel(*capture_forward_launch("
            "d, True, 'bf16', dict(variant_blocks(name, d, True)._replace(deferred_sum=dsum)._asdict()))[1])"
            ".asm['ptx'])); "
            f"print(json.dumps([[count(n, d, False), count(n, d, True)] for n, d, _ in {cells!r}]))")
    counts = compiler_json(code)
    for (name, _, consumers), (plain, deferred) in zip(cells, counts):
        assert plain - deferred == 4 * consumers, (name, plain, deferred)
