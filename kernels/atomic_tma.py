"""atomic_tma (FA3 style on Hopper): one kernel over K/V blocks; the K/V block stays resident, dK/dV
accumulate on chip, and each query block's dQ contribution dS K is added into an fp32 accumulator
with one TMA reduce per tile (`desc.atomic_add` -> `cp.reduce.async.bulk` on sm90) instead of
BLOCK_M x D per-element atomics. ~10 N^2 d FLOPs, like `atomic`.

Paths, chosen per call by `tma_paths` (never a crash where TMA cannot run):
  TMA_LOAD  Q, dO, K, V tiles through tensor descriptors (zero padding beyond the sequence and head
            dim, so no load masks); else pointer loads with masks.
  DQ_MODE   DQ_TMA: TMA reduce-add of the fp32 tile; DQ_ATOMIC: per-element relaxed fp32 atomics
            (the fallback, and what the CPU interpreter runs: it has no descriptor reduce);
            DQ_NONE: no dQ here (deterministic mode, dQ by the atomic-free pass of two_pass).
The fp32 accumulator is [B, H, Nq, BLOCK_D] (padded head dim, 16-byte aligned rows whatever D is);
a finishing kernel scales it by sm_scale and writes dq in q's dtype and layout.

Packed varlen batches (IS_VARLEN, kernels/varlen.py): B = 1, the blocks axis runs over the (document, key
block) pairs of Packing.block_indices, pointers move to the document (backward_steps.document_pointers) and
every bound, causal shift and descriptor shape is the document's, so the accumulator is [1, H, total_q,
BLOCK_D] and the finishing kernel sees one sequence of total_q rows. Every mode runs packed.

Score modifiers (issue 24) through the shared helpers (kernels.common: score_mask, modify_scores, softcap_grad,
band_blocks, gate_values): a sliding window (WINDOW_LEFT / WINDOW_RIGHT >= 0: only the query blocks inside the band
are walked, their two edges masked), softcap (SOFTCAP > 0) and the forget gate (GATED: G [B, H, Nq] fp32 like LSE;
DG gets the per-key sums of dS, DG_QUERY the per-query ones by atomics, kernels/atomic.py says why).
"""
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels.backward_args import NO_GATE, GateTensors, backward_args
from kernels.backward_steps import document_pointers
from kernels.common import (Strides, band_blocks, block_and_head, cdiv, document_block, even_blocks, gate_values, head_block,
                            load_tile, modifier_args, modify_scores, score_mask, softcap_grad)
from kernels.dq_finish import dq_finish
from kernels.dkdv_dq import launch_dq
from kernels.forward import dot_precision
from kernels.varlen import UNIFORM_ARGS
from kernels.launch import launch

DQ_NONE, DQ_ATOMIC, DQ_TMA = 0, 1, 2


class TmaConfig(NamedTuple):  # hashable: Triton specializes the kernel on it like on any constexpr
    """The kernel's compile-time switches, one constexpr (CFG)."""
    HEAD_DIM: int
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_D: int  # head_block(HEAD_DIM): the accumulator's row width too
    CAUSAL: bool
    TMA_LOAD: bool  # module doc
    DQ_MODE: int  # DQ_NONE, DQ_ATOMIC or DQ_TMA
    WARP_SPECIALIZE: bool  # the unmasked loop as tl.range(..., warp_specialize=True)
    EVEN_M: bool  # kernels.common.even_blocks
    EVEN_N: bool
    EVEN_D: bool
    DOT_PRECISION: str
    WINDOW_LEFT: int  # score modifiers: kernels.common.modifier_args
    WINDOW_RIGHT: int
    SOFTCAP: float
    GATED: bool


class TmaKeys(NamedTuple):
    """The resident key block (built in the kernel)."""
    o_n: tl.tensor  # [BN] key indices
    k: tl.tensor  # [BN, BD]
    v: tl.tensor  # [BN, BD]
    gk: tl.tensor  # [BN] the keys' gate values for the walked head (GATED), else unread zeros


class TmaHead(NamedTuple):
    """One query head's sources and destinations (built in the kernel)."""
    d_q: tl.tensor  # Q's and dO's tensor descriptors (TMA_LOAD), else q, do
    d_do: tl.tensor
    d_dq: tl.tensor  # the accumulator's descriptor (DQ_TMA), else dq
    q: tl.tensor  # pointers moved to the (batch, head)
    do: tl.tensor
    dq: tl.tensor  # the head's rows of the fp32 accumulator [Nq, BLOCK_D]
    lse: tl.tensor
    delta: tl.tensor
    s_q: Strides  # Q's and dO's kernels.common.Strides (pointer loads)
    s_do: Strides
    g: tl.tensor  # the head's gate cumsum (GATED)
    dgq: tl.tensor  # the head's per-query sums of dS (GATED, DQ_MODE != 0)


@triton.jit
def _dkdv_dq_step(acc, keys, head, start_m, seq_q, seq_k, qk_scale,
                  CFG: tl.constexpr, MASK_CAUSAL: tl.constexpr, BAND: tl.constexpr):
    """One query block [start_m, start_m + BLOCK_M) against the resident key block: adds to dK
    (unscaled dS^T Q), dV (P^T dO), and adds the unscaled dS K into the fp32 dQ accumulator.
    acc = (dK, dV, dG sums) -> the same, updated. MASK_CAUSAL: the block crosses the causal diagonal; BAND: a window
    edge (CFG's window mask). Modifiers (module doc): SOFTCAP, GATED (keys.gk the resident keys' gate values; the
    dG sums accumulate sum_i dS_ij; unless DQ_MODE = 0 (the dQ pass does it) head.dgq, the head's per-query sums,
    gets sum_j dS_ij by atomics)."""
    BLOCK_M: tl.constexpr = CFG.BLOCK_M
    BLOCK_D: tl.constexpr = CFG.BLOCK_D
    HEAD_DIM: tl.constexpr = CFG.HEAD_DIM
    EVEN_M: tl.constexpr = CFG.EVEN_M
    EVEN_N: tl.constexpr = CFG.EVEN_N
    EVEN_D: tl.constexpr = CFG.EVEN_D
    DOT_PRECISION: tl.constexpr = CFG.DOT_PRECISION
    SOFTCAP: tl.constexpr = CFG.SOFTCAP
    GATED: tl.constexpr = CFG.GATED
    DQ_MODE: tl.constexpr = CFG.DQ_MODE
    WINDOW_LEFT: tl.constexpr = CFG.WINDOW_LEFT if BAND else -1
    WINDOW_RIGHT: tl.constexpr = CFG.WINDOW_RIGHT if BAND else -1
    b_dk, b_dv, b_dgk = acc
    o_n, b_k, b_v, b_gk = keys
    d_q, d_do, d_dq = head.d_q, head.d_do, head.d_dq
    Q, DO, DQ_ACC, LSE, DELTA = head.q, head.do, head.dq, head.lse, head.delta
    s_q, s_do, G, DGQ = head.s_q, head.s_do, head.g, head.dgq
    o_m = start_m + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_m = o_m < seq_q
    if CFG.TMA_LOAD:
        b_q = d_q.load([start_m, 0])  # [BM, BD], zeros past Nq and D
        b_do = d_do.load([start_m, 0])  # [BM, BD]
    else:
        b_q = load_tile(Q + o_m[:, None] * s_q.n + o_d[None, :] * s_q.d,
                        m_m[:, None], o_d[None, :] < HEAD_DIM, not EVEN_M, not EVEN_D)  # [BM, BD]
        b_do = load_tile(DO + o_m[:, None] * s_do.n + o_d[None, :] * s_do.d,
                         m_m[:, None], o_d[None, :] < HEAD_DIM, not EVEN_M, not EVEN_D)  # [BM, BD]
    if EVEN_M:
        b_lse = tl.load(LSE + o_m)  # [BM]
        b_delta = tl.load(DELTA + o_m)  # [BM]
    else:
        b_lse = tl.load(LSE + o_m, mask=m_m, other=float("inf"))  # padded rows: P = 0
        b_delta = tl.load(DELTA + o_m, mask=m_m, other=0.)

    b_sT = tl.dot(b_k, tl.trans(b_q), input_precision=DOT_PRECISION) * qk_scale  # [BN, BD] @ [BD, BM] -> [BN, BM]
    b_tanhT = b_sT
    if SOFTCAP > 0 or GATED:
        b_gq = gate_values(G, o_m, seq_q, GATED)  # [BM]
        b_sT, b_tanhT = modify_scores(b_sT, b_gq[None, :], b_gk[:, None], SOFTCAP, GATED)  # [BN, BM] x 2
    if MASK_CAUSAL or WINDOW_LEFT >= 0 or WINDOW_RIGHT >= 0 or not EVEN_M or not EVEN_N:
        b_sT = tl.where(score_mask(o_m[None, :], o_n[:, None], seq_q, seq_k, MASK_CAUSAL, not EVEN_M, not EVEN_N,
                                   WINDOW_LEFT, WINDOW_RIGHT),
                        b_sT, float("-inf"))
    b_pT = tl.math.exp2(b_sT - b_lse[None, :])  # [BN, BM]
    b_dv += tl.dot(b_pT.to(b_do.dtype), b_do, input_precision=DOT_PRECISION)  # [BN, BM] @ [BM, BD] -> [BN, BD]
    b_dpT = tl.dot(b_v, tl.trans(b_do), input_precision=DOT_PRECISION)  # [BN, BD] @ [BD, BM] -> [BN, BM]
    b_dsT = b_pT * (b_dpT - b_delta[None, :])  # [BN, BM]
    if GATED:
        b_dgk += tl.sum(b_dsT, 1)  # [BN]
        if DQ_MODE != 0:  # the query half from the same dS (kernels/atomic.py: the two halves must cancel exactly)
            tl.atomic_add(DGQ + o_m, tl.sum(b_dsT, 0), mask=m_m, sem="relaxed")  # [BM]
    b_dsT = softcap_grad(b_dsT, b_tanhT, SOFTCAP).to(b_q.dtype)  # [BN, BM]
    b_dk += tl.dot(b_dsT, b_q, input_precision=DOT_PRECISION)  # [BN, BM] @ [BM, BD] -> [BN, BD]
    if DQ_MODE != 0:
        b_dq = tl.dot(tl.trans(b_dsT), b_k, input_precision=DOT_PRECISION)  # [BM, BN] @ [BN, BD] -> [BM, BD]
        if DQ_MODE == 2:
            d_dq.atomic_add([start_m, 0], b_dq)  # one TMA reduce; rows past Nq are clipped
        else:
            tl.atomic_add(DQ_ACC + o_m[:, None] * BLOCK_D + o_d[None, :], b_dq, mask=m_m[:, None], sem="relaxed")
    return b_dk, b_dv, b_dgk


@triton.jit
def _walk_queries(acc, keys, head, lo, hi, seq_q, seq_k, qk_scale,
                  CFG: tl.constexpr, MASK_CAUSAL: tl.constexpr, BAND: tl.constexpr):
    """acc plus the query blocks [lo, hi) (_dkdv_dq_step's MASK_CAUSAL, BAND). The blocks every resident key sees
    whole (neither mask) run as tl.range with CFG.WARP_SPECIALIZE."""
    BLOCK_M: tl.constexpr = CFG.BLOCK_M
    WARP_SPECIALIZE: tl.constexpr = CFG.WARP_SPECIALIZE
    if MASK_CAUSAL or BAND:
        for start_m in range(lo, hi, BLOCK_M):
            acc = _dkdv_dq_step(acc, keys, head, start_m, seq_q, seq_k, qk_scale, CFG, MASK_CAUSAL, BAND)
    else:
        for start_m in tl.range(lo, hi, BLOCK_M, warp_specialize=WARP_SPECIALIZE):
            acc = _dkdv_dq_step(acc, keys, head, start_m, seq_q, seq_k, qk_scale, CFG, MASK_CAUSAL, BAND)
    return acc


@triton.jit
def _atomic_tma_kernel(tensors, strides, sizes, docs, gate,
                       CFG: tl.constexpr, LONGEST_FIRST: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Grid (cdiv(Nk, BLOCK_N), B * Hkv), or (B * Hkv, cdiv(Nk, BLOCK_N)) with LONGEST_FIRST.
    dK, dV of key block i_n of kv-head i_hk, summed over the group of query heads sharing it (GQA);
    tensors, strides, sizes, docs, gate: kernels.backward_args; tensors.dq (DQ_ACC) is the fp32 accumulator
    [B, H, Nq, BLOCK_D] (strides.dq None) that receives the unscaled dS K of every (query, key) block pair.
    CFG: TmaConfig. IS_VARLEN: B = 1 and the blocks axis runs over the (document, key block) pairs of
    docs.block_indices; DQ_ACC is [1, H, total_q, BLOCK_D]. Score modifiers (module doc): gate.g the gate's cumsum,
    gate.dg its per-key sums of dS, gate.dg_query its per-query sums (atomics; unless DQ_MODE = 0), all like LSE
    (None unless GATED)."""
    HEAD_DIM: tl.constexpr = CFG.HEAD_DIM
    BLOCK_M: tl.constexpr = CFG.BLOCK_M
    BLOCK_N: tl.constexpr = CFG.BLOCK_N
    BLOCK_D: tl.constexpr = CFG.BLOCK_D
    DQ_MODE: tl.constexpr = CFG.DQ_MODE
    GATED: tl.constexpr = CFG.GATED
    WINDOWED: tl.constexpr = CFG.WINDOW_LEFT >= 0 or CFG.WINDOW_RIGHT >= 0
    seq_q, seq_k, heads, kv_heads, qk_scale, sm_scale = sizes
    G, DG, DG_QUERY = gate
    s_q, s_k, s_v, s_do = strides.q, strides.k, strides.v, strides.do  # no dq strides (Triton 3.6 loses a None
    s_dk, s_dv = strides.dk, strides.dv  # leaf across loops)
    qk_scale, sm_scale = tl.cast(qk_scale, tl.float32), tl.cast(sm_scale, tl.float32)  # fp32 loop carries whatever the caller passed
    i_n, i_bhk = block_and_head(LONGEST_FIRST)
    i_b = i_bhk // kv_heads
    i_hk = i_bhk % kv_heads
    group = heads // kv_heads
    stride_lse = seq_q  # LSE, DELTA [B, H, Nq], DQ_ACC [B, H, Nq, BLOCK_D] (varlen: total_q rows per head)
    heads_walked = group
    if IS_VARLEN:
        i_n, bos_q, seq_q, bos_k, seq_k = document_block(docs, i_n)
        tensors = document_pointers(tensors, strides, BLOCK_D, bos_q, bos_k)
        # From here on seq_q / seq_k are the document's: loads, masks, the causal shift (bottom-right per
        # document) and descriptor shapes stop at its end. A document without queries walks no head (and
        # builds no 0-row descriptor); its dK, dV are stored as zeros.
        heads_walked = tl.where(seq_q > 0, group, 0)
        if GATED:  # like LSE (a gated batch has bos_k == bos_q)
            G += bos_q
            DG += bos_q
            if DQ_MODE != 0:
                DG_QUERY += bos_q
    Q, K, V, DO, DQ_ACC = tensors.q, tensors.k, tensors.v, tensors.do, tensors.dq
    DK, DV, LSE, DELTA = tensors.dk, tensors.dv, tensors.lse, tensors.delta
    start_n = i_n * BLOCK_N
    o_n = start_n + tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_nd = (o_n[:, None] < seq_k) & (o_d[None, :] < HEAD_DIM)
    K += i_b * s_k.b + i_hk * s_k.h
    V += i_b * s_v.b + i_hk * s_v.h
    if CFG.TMA_LOAD:
        d_k = tl.make_tensor_descriptor(K, shape=[seq_k, HEAD_DIM], strides=[s_k.n, 1], block_shape=[BLOCK_N, BLOCK_D])
        d_v = tl.make_tensor_descriptor(V, shape=[seq_k, HEAD_DIM], strides=[s_v.n, 1], block_shape=[BLOCK_N, BLOCK_D])
        b_k = d_k.load([start_n, 0])  # [BN, BD]
        b_v = d_v.load([start_n, 0])  # [BN, BD]
    else:
        b_k = tl.load(K + o_n[:, None] * s_k.n + o_d[None, :] * s_k.d, mask=m_nd, other=0.)  # [BN, BD]
        b_v = tl.load(V + o_n[:, None] * s_v.n + o_d[None, :] * s_v.d, mask=m_nd, other=0.)  # [BN, BD]
    b_dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    b_dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    # Query blocks that see this key block: [m_lo, m_mid) cross the causal diagonal, [m_mid, Nq) see all of it.
    if WINDOWED:  # only the band's [m_lo, m_hi) (edges masked; a causal window: right = 0)
        m_lo, m_full_lo, m_full_hi, m_hi = band_blocks(start_n, seq_q, seq_q - seq_k, BLOCK_N, BLOCK_M,
                                                       CFG.WINDOW_RIGHT, CFG.WINDOW_LEFT)
    elif CFG.CAUSAL:
        shift = seq_k - seq_q  # query i sees key j iff j <= i + shift
        m_lo = tl.maximum(start_n - shift, 0) // BLOCK_M * BLOCK_M
        m_full = tl.maximum(start_n + BLOCK_N - 1 - shift, m_lo)
        m_mid = tl.minimum(m_lo + tl.cdiv(m_full - m_lo, BLOCK_M) * BLOCK_M, seq_q)
    else:
        m_lo = 0
        m_mid = 0
    # Packed: a query tile that straddles the document's end has its out-of-document rows zero (descriptor
    # shape = document length, or load masks), LSE +inf and the score mask drops them, so P = 0 and dS = 0
    # there: their dQ rows are exactly 0. The reduce-add clips rows past the descriptor's (document's) end
    # and the atomics mask them; even an unclipped add into the neighbour document's rows would add 0.
    for i_g in range(heads_walked):
        i_h = i_hk * group + i_g
        i_bh = i_b * heads + i_h
        q_base = Q + i_b * s_q.b + i_h * s_q.h
        do_base = DO + i_b * s_do.b + i_h * s_do.h
        dq_base = DQ_ACC + i_bh.to(tl.int64) * stride_lse * BLOCK_D
        G_h, DGQ_h = G, DG_QUERY
        if GATED:
            G_h = G + i_bh * stride_lse
            if DQ_MODE != 0:
                DGQ_h = DG_QUERY + i_bh * stride_lse
        b_gk = gate_values(G_h, o_n, seq_k, GATED)  # [BN]
        b_dgk = tl.zeros([BLOCK_N], dtype=tl.float32)
        if CFG.TMA_LOAD:
            d_q = tl.make_tensor_descriptor(q_base, shape=[seq_q, HEAD_DIM], strides=[s_q.n, 1],
                                            block_shape=[BLOCK_M, BLOCK_D])
            d_do = tl.make_tensor_descriptor(do_base, shape=[seq_q, HEAD_DIM], strides=[s_do.n, 1],
                                             block_shape=[BLOCK_M, BLOCK_D])
        else:
            d_q = q_base
            d_do = do_base
        if DQ_MODE == 2:
            d_dq = tl.make_tensor_descriptor(dq_base, shape=[seq_q, BLOCK_D], strides=[BLOCK_D, 1],
                                             block_shape=[BLOCK_M, BLOCK_D])
        else:
            d_dq = dq_base
        acc = (b_dk, b_dv, b_dgk)
        keys = TmaKeys(o_n, b_k, b_v, b_gk)
        head = TmaHead(d_q, d_do, d_dq, q_base, do_base, dq_base, LSE + i_bh * stride_lse, DELTA + i_bh * stride_lse,
                       s_q, s_do, G_h, DGQ_h)
        if WINDOWED:  # the band's early edge (masked), its inside, its late edge (masked)
            acc = _walk_queries(acc, keys, head, m_lo, m_full_lo, seq_q, seq_k, qk_scale, CFG, False, True)
            acc = _walk_queries(acc, keys, head, m_full_lo, m_full_hi, seq_q, seq_k, qk_scale, CFG, False, False)
            acc = _walk_queries(acc, keys, head, m_full_hi, m_hi, seq_q, seq_k, qk_scale, CFG, False, True)
        else:  # the causal diagonal (masked), then the blocks every key sees whole
            acc = _walk_queries(acc, keys, head, m_lo, m_mid, seq_q, seq_k, qk_scale, CFG, True, False)
            acc = _walk_queries(acc, keys, head, m_mid, seq_q, seq_q, seq_k, qk_scale, CFG, False, False)
        b_dk, b_dv, b_dgk = acc
        if GATED:
            tl.store(DG + i_bh * stride_lse + o_n, b_dgk, mask=o_n < seq_k)
    tl.store(DK + i_b * s_dk.b + i_hk * s_dk.h + o_n[:, None] * s_dk.n + o_d[None, :] * s_dk.d,
             (b_dk * sm_scale).to(DK.dtype.element_ty), mask=m_nd)
    tl.store(DV + i_b * s_dv.b + i_hk * s_dv.h + o_n[:, None] * s_dv.n + o_d[None, :] * s_dv.d,
             b_dv.to(DV.dtype.element_ty), mask=m_nd)


def _interpreting() -> bool:
    import os
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _descriptor_ok(t: torch.Tensor) -> bool:
    """A [B, N, H, D] tensor can be read through 2-D [N, D] tensor descriptors per (batch, head):
    unit head-dim stride, 16-byte aligned base and 16-byte multiples for every other stride."""
    size = t.element_size()
    return (t.stride(3) == 1 or t.shape[3] == 1) and t.data_ptr() % 16 == 0 and all(
        (s * size) % 16 == 0 for s in (t.stride(0), t.stride(1), t.stride(2)))


def tma_paths(q, k, v, do) -> tuple[bool, bool, str]:
    """(descriptor loads possible, descriptor reduce possible, why not) for these tensors here."""
    if not hasattr(tl, "make_tensor_descriptor"):
        return False, False, f"Triton {triton.__version__} has no tl.make_tensor_descriptor"
    if _interpreting():
        layout_ok = all(_descriptor_ok(t) for t in (q, k, v, do))
        return layout_ok, False, "the Triton interpreter has no descriptor reduce (desc.atomic_add)"
    if not q.is_cuda or torch.cuda.get_device_capability(q.device)[0] < 9:
        return False, False, "tensor descriptors need an sm90+ GPU"
    if not all(_descriptor_ok(t) for t in (q, k, v, do)):
        return False, True, "q/k/v/do strides are not 16-byte aligned with a unit head-dim stride"
    return True, True, ""


def _set_allocator(device) -> None:
    """On-device tensor descriptors need scratch memory for the descriptor itself."""
    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, device=device, dtype=torch.int8)
    triton.set_allocator(alloc)


def atomic_tma_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float, BLOCK_M: int, BLOCK_N: int,
                        num_warps: int, num_stages: int, tma_load: bool = True, tma_reduce: bool = True,
                        deterministic: bool = False, longest_first: bool = False, warp_specialize: bool = False,
                        varlen=None, mods=None, gate=None, dq_acc=None):
    """-> dq like q, dk/dv like k/v. dq_acc: the zeroed fp32 accumulator [B, H, Nq, head_block(D)] (variants.base:
    zeroed by the delta launch), or None (zeros here); unused when deterministic. tma_load / tma_reduce are
    requests: a path that cannot run here (`tma_paths`) falls back to pointer loads / per-element atomics.
    varlen: a kernels.varlen.Packing (q [1, total_q, H, D], k/v [1, total_k, Hkv, D]).
    mods: window / softcap (variants.problem.Modifiers) or None; gate: a kernels.gate.GateSums or None (module doc:
    both its sums written)."""
    batch, seq_q, heads, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    block_d = head_block(head_dim)
    can_load, can_reduce, _ = tma_paths(q, k, v, do)
    use_load = tma_load and can_load
    dq_mode = DQ_NONE if deterministic else (DQ_TMA if tma_reduce and can_reduce else DQ_ATOMIC)
    if (use_load or dq_mode == DQ_TMA) and not _interpreting():
        _set_allocator(q.device)
    even_m, even_n, even_d = even_blocks(seq_q, seq_k, head_dim, block_d, walked=BLOCK_M, resident=BLOCK_N,
                                         walks_queries=True, causal=causal, varlen=varlen is not None)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dq = torch.empty_like(q)
    # [B, H, Nq, BD] fp32 (varlen: [1, H, total_q, BD])
    if deterministic:
        dq_acc = dq
    elif dq_acc is None:
        dq_acc = torch.zeros(batch, heads, seq_q, block_d, device=q.device, dtype=torch.float32)
    longest_first = longest_first and (causal or varlen is not None)  # else every program has the same work
    doc_args, blocks = (UNIFORM_ARGS, cdiv(seq_k, BLOCK_N)) if varlen is None else \
        varlen.kernel_args(block_k=BLOCK_N, heaviest_first=longest_first, causal=causal)
    grid = (blocks, batch * kv_heads)
    if blocks > 0:  # packed: 0 when no document has a key
        launch(_atomic_tma_kernel, grid[::-1] if longest_first else grid,
            **backward_args(q, k, v, do, dq_acc, dk, dv, lse, delta, scale, dq_strides=False), **doc_args,
            gate=gate_tensors(gate, deterministic),
            CFG=TmaConfig(HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=block_d, CAUSAL=causal,
                          TMA_LOAD=use_load, DQ_MODE=dq_mode, WARP_SPECIALIZE=warp_specialize, EVEN_M=even_m,
                          EVEN_N=even_n, EVEN_D=even_d, DOT_PRECISION=dot_precision(q.dtype),
                          **modifier_args(mods, gate is not None, causal)),
            LONGEST_FIRST=longest_first, num_warps=num_warps, num_stages=num_stages)
    if deterministic:  # dQ by the atomic-free pass (query block resident, walks keys)
        launch_dq(q, k, v, do, dq, lse, delta, causal=causal, scale=scale, BLOCK_M=BLOCK_N, BLOCK_N=BLOCK_M,
                  num_warps=num_warps, num_stages=num_stages, longest_first=longest_first, varlen=varlen, mods=mods,
                  gate=gate)
        return dq, dk, dv
    dq_finish(dq_acc, dq, scale)
    return dq, dk, dv


def gate_tensors(gate, deterministic: bool) -> GateTensors:
    """The kernel's gate argument: the gate's cumsum, its per-key sums (kernels.gate.GateSums.as_key) and, unless
    deterministic (the dQ pass writes them), its per-query sums (as_query, zeroed: atomics add into it)."""
    if gate is None:
        return NO_GATE
    return GateTensors(gate.cumsum, gate.as_key, None if deterministic else gate.query_for_atomics())
