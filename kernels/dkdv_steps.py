"""The dK/dV side of the shared backward steps (math and modifiers: kernels/backward_steps.py): a resident key block
walks the query blocks that see it. dkdv_step adds one query block, dkdv_walk runs it over a range of query blocks,
dkdv_over_queries picks the ranges (band edges, the causal diagonal in slices, the blocks every row sees) and
dkdv_program is one program's whole job. Compile-time switches: one kernels.backward_args.StepConfig (CFG)."""
from typing import NamedTuple

import triton
import triton.language as tl

from kernels.backward_steps import second_chunk
from kernels.common import band_blocks, gate_values, load_tile, modify_scores, score_mask, softcap_grad


class KeyBlock(NamedTuple):
    """A dK/dV program's resident tiles (built in the kernel)."""
    o_n: tl.tensor  # [BN] key indices
    k: tl.tensor  # [BN, BD], pre-multiplied by qk_scale when PRESCALED
    v: tl.tensor  # [BN, BDV]
    k2: tl.tensor  # [BN, BD2] the head dim's second chunk (BLOCK_D2 > 0), else an unread placeholder
    v2: tl.tensor
    gk: tl.tensor  # [BN] the keys' gate values for the walked head (GATED), else unread zeros


class DkdvAcc(NamedTuple):
    """The fp32 accumulators a dK/dV walk carries."""
    dk: tl.tensor  # [BN, BD]
    dv: tl.tensor  # [BN, BDV]
    dk2: tl.tensor  # [BN, BD2] (BLOCK_D2 > 0), else an unread placeholder
    dv2: tl.tensor
    dgk: tl.tensor  # [BN] sum_i dS_ij (GATED)


class QueryHead(NamedTuple):
    """One query head's pointers, moved to its (batch, head)."""
    q: tl.tensor
    do: tl.tensor
    lse: tl.tensor  # fp32, base 2
    delta: tl.tensor
    dq: tl.tensor  # the fp32 dQ that ACCUM_DQ adds into
    g: tl.tensor  # the gate's cumsum (GATED), else None
    dgq: tl.tensor  # the per-query sums of dS that ACCUM_DQ adds into (GATED), else None


@triton.jit
def dkdv_step(acc, keys, head, strides, seq_q, seq_k, qk_scale, start_m,
              CFG: tl.constexpr, BLOCK_M: tl.constexpr, MASK_CAUSAL: tl.constexpr, BAND: tl.constexpr):
    """acc plus one query block [start_m, start_m + BLOCK_M)'s contribution to the resident keys' dK, dV (and, with
    ACCUM_DQ, atomically adds the unscaled dS K to head.dq; with GATED also sum_j dS_ij to head.dgq).
    MASK_CAUSAL: the block crosses the causal diagonal; BAND: it crosses a window edge (CFG's window mask).
    GRADS: which accumulators this program updates: 1 dV only (no dP, dS), 2 dK only (no P^T dO), 3 both."""
    BLOCK_D: tl.constexpr = CFG.BLOCK_D
    BLOCK_D2: tl.constexpr = CFG.BLOCK_D2
    BLOCK_DV: tl.constexpr = CFG.BLOCK_DV
    WINDOW_LEFT: tl.constexpr = CFG.WINDOW_LEFT if BAND else -1
    WINDOW_RIGHT: tl.constexpr = CFG.WINDOW_RIGHT if BAND else -1
    b_dk, b_dv, b_dk2, b_dv2, b_dgk = acc
    s_q, s_do, s_dq = strides.q, strides.do, strides.dq
    o_n = keys.o_n
    o_m = start_m + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_m = o_m < seq_q
    m_d = o_d < CFG.HEAD_DIM
    b_qT = load_tile(head.q + o_m[None, :] * s_q.n + o_d[:, None] * s_q.d,
                     m_m[None, :], m_d[:, None], not CFG.EVEN_M, not CFG.EVEN_D)  # [BD, BM]
    o_dv = tl.arange(0, BLOCK_DV)
    b_do = load_tile(head.do + o_m[:, None] * s_do.n + o_dv[None, :] * s_do.d,
                     m_m[:, None], o_dv[None, :] < CFG.HEAD_DIM_V, not CFG.EVEN_M, not CFG.EVEN_DV)  # [BM, BDV]
    if CFG.EVEN_M:
        b_lse = tl.load(head.lse + o_m)  # [BM]
        b_delta = tl.load(head.delta + o_m)  # [BM]
    else:
        b_lse = tl.load(head.lse + o_m, mask=m_m, other=float("inf"))  # padded rows: P = 0
        b_delta = tl.load(head.delta + o_m, mask=m_m, other=0.)

    b_sT = tl.dot(keys.k, b_qT, input_precision=CFG.DOT_PRECISION)  # [BN, BD] @ [BD, BM] -> [BN, BM]
    if BLOCK_D2 > 0:  # the head dim's second chunk
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_d2 = o_d2 < CFG.HEAD_DIM
        b_qT2 = load_tile(head.q + o_m[None, :] * s_q.n + o_d2[:, None] * s_q.d,
                          m_m[None, :], m_d2[:, None], not CFG.EVEN_M, not CFG.EVEN_D2)  # [BD2, BM]
        b_do2 = load_tile(head.do + o_m[:, None] * s_do.n + o_d2[None, :] * s_do.d,
                          m_m[:, None], m_d2[None, :], not CFG.EVEN_M, not CFG.EVEN_D2)  # [BM, BD2]
        b_sT += tl.dot(keys.k2, b_qT2, input_precision=CFG.DOT_PRECISION)  # [BN, BD2] @ [BD2, BM]
    if not CFG.PRESCALED:
        b_sT = b_sT * qk_scale
    b_tanhT = b_sT
    if CFG.SOFTCAP > 0 or CFG.GATED:
        b_gq = gate_values(head.g, o_m, seq_q, CFG.GATED)  # [BM]
        b_sT, b_tanhT = modify_scores(b_sT, b_gq[None, :], keys.gk[:, None], CFG.SOFTCAP, CFG.GATED)
    if MASK_CAUSAL or WINDOW_LEFT >= 0 or WINDOW_RIGHT >= 0 or not CFG.EVEN_M or not CFG.EVEN_N:
        b_sT = tl.where(score_mask(o_m[None, :], o_n[:, None], seq_q, seq_k, MASK_CAUSAL, not CFG.EVEN_M,
                                   not CFG.EVEN_N, WINDOW_LEFT, WINDOW_RIGHT),
                        b_sT, float("-inf"))
    b_pT = tl.math.exp2(b_sT - b_lse[None, :])  # [BN, BM]
    if CFG.GRADS != 2:  # not dK only
        b_dv += tl.dot(b_pT.to(b_do.dtype), b_do, input_precision=CFG.DOT_PRECISION)  # [BN, BM] @ [BM, BDV]
        if BLOCK_D2 > 0:
            b_dv2 += tl.dot(b_pT.to(b_do.dtype), b_do2, input_precision=CFG.DOT_PRECISION)  # [BN, BM] @ [BM, BD2]
    if CFG.GRADS != 1:  # not dV only
        b_dpT = tl.dot(keys.v, tl.trans(b_do), input_precision=CFG.DOT_PRECISION)  # [BN, BDV] @ [BDV, BM]
        if BLOCK_D2 > 0:
            b_dpT += tl.dot(keys.v2, tl.trans(b_do2), input_precision=CFG.DOT_PRECISION)  # [BN, BD2] @ [BD2, BM]
        b_dsT = b_pT * (b_dpT - b_delta[None, :])  # [BN, BM]
        if CFG.GATED:
            b_dgk += tl.sum(b_dsT, 1)  # [BN]
            if CFG.ACCUM_DQ:  # the query half from the same dS (kernels/gate.py: the two halves must cancel exactly)
                tl.atomic_add(head.dgq + o_m, tl.sum(b_dsT, 0), mask=m_m, sem="relaxed")  # [BM]
        b_dsT = softcap_grad(b_dsT, b_tanhT, CFG.SOFTCAP)
        b_dk += tl.dot(b_dsT.to(b_qT.dtype), tl.trans(b_qT), input_precision=CFG.DOT_PRECISION)  # [BN, BM] @ [BM, BD]
        if BLOCK_D2 > 0:
            b_dk2 += tl.dot(b_dsT.to(b_qT.dtype), tl.trans(b_qT2), input_precision=CFG.DOT_PRECISION)  # -> [BN, BD2]
    if CFG.ACCUM_DQ:  # only with GRADS = 3 and one head-dim chunk (launch_dkdv refuses the mixes)
        b_dq = tl.dot(tl.trans(b_dsT.to(keys.v.dtype)), keys.k, input_precision=CFG.DOT_PRECISION)  # [BM, BN] @ [BN, BD]
        tl.atomic_add(head.dq + o_m[:, None] * s_dq.n + o_d[None, :] * s_dq.d, b_dq,
                      mask=m_m[:, None] & m_d[None, :])
    return DkdvAcc(b_dk, b_dv, b_dk2, b_dv2, b_dgk)


@triton.jit
def dkdv_walk(acc, keys, head, strides, seq_q, seq_k, qk_scale, lo, hi,
              CFG: tl.constexpr, STEP: tl.constexpr, MASK_CAUSAL: tl.constexpr, BAND: tl.constexpr):
    """acc plus the query blocks [lo, hi) in blocks of STEP rows (dkdv_step's MASK_CAUSAL, BAND)."""
    for start_m in range(lo, hi, STEP):
        acc = dkdv_step(acc, keys, head, strides, seq_q, seq_k, qk_scale, start_m, CFG, STEP, MASK_CAUSAL, BAND)
    return acc


@triton.jit
def dkdv_over_queries(acc, keys, head, strides, seq_q, seq_k, qk_scale, start_n, CFG: tl.constexpr):
    """Walks every query block that sees the key block [start_n, start_n + BLOCK_N) for one head: windowed, only
    those inside the band (its two edges in slices, masked); causal, the diagonal in slices (masked), then the
    blocks every row sees; else all of them."""
    BLOCK_M: tl.constexpr = CFG.BLOCK_M
    SLICE_M: tl.constexpr = CFG.BLOCK_M // CFG.SLICE
    if CFG.WINDOW_LEFT >= 0 or CFG.WINDOW_RIGHT >= 0:
        m_lo, m_full_lo, m_full_hi, m_hi = band_blocks(start_n, seq_q, seq_q - seq_k, CFG.BLOCK_N, BLOCK_M,
                                                       CFG.WINDOW_RIGHT, CFG.WINDOW_LEFT)
        acc = dkdv_walk(acc, keys, head, strides, seq_q, seq_k, qk_scale, m_lo, m_full_lo, CFG, SLICE_M, False, True)
        acc = dkdv_walk(acc, keys, head, strides, seq_q, seq_k, qk_scale, m_full_lo, m_full_hi, CFG, BLOCK_M, False,
                        False)
        acc = dkdv_walk(acc, keys, head, strides, seq_q, seq_k, qk_scale, m_full_hi, m_hi, CFG, SLICE_M, False, True)
    elif CFG.CAUSAL:
        shift = seq_k - seq_q  # query i sees key j iff j <= i + shift
        m_lo = tl.maximum(start_n - shift, 0) // SLICE_M * SLICE_M  # first query that sees the block
        m_full = tl.maximum(start_n + CFG.BLOCK_N - 1 - shift, m_lo)  # first query that sees all of it
        m_mid = tl.minimum(m_lo + tl.cdiv(m_full - m_lo, SLICE_M) * SLICE_M, seq_q)
        acc = dkdv_walk(acc, keys, head, strides, seq_q, seq_k, qk_scale, m_lo, m_mid, CFG, SLICE_M, True, False)
        acc = dkdv_walk(acc, keys, head, strides, seq_q, seq_k, qk_scale, m_mid, seq_q, CFG, BLOCK_M, False, False)
    else:
        acc = dkdv_walk(acc, keys, head, strides, seq_q, seq_k, qk_scale, 0, seq_q, CFG, BLOCK_M, False, False)
    return acc


@triton.jit
def dkdv_program(tensors, strides, gate, seq_q, seq_k, stride_lse, heads, group, qk_scale, sm_scale, i_n, i_b, i_hk,
                 CFG: tl.constexpr):
    """dK, dV of key block i_n of kv-head i_hk, summed over the `group` query heads that share it (GQA).
    LSE, DELTA [B, H, stride_lse] fp32; seq_q, seq_k: this sequence's lengths (a varlen document's).
    GRADS = 1 (dV) or 2 (dK): only that gradient is computed and stored (a split dK/dV pass, half the
    accumulator registers). BLOCK_D2 > 0: the head dim in two chunks (BLOCK_D, then BLOCK_D2; no padding to
    the next power of two when HEAD_DIM = BLOCK_D + BLOCK_D2, e.g. 192 = 128 + 64). Modifiers
    (kernels/backward_steps.py): gate = (G, DG, DG_QUERY) [B, H, stride_lse] fp32 like LSE; DG gets sum_i dS_ij of
    every key j and query head (GATED, GRADS != 1), and with ACCUM_DQ DG_QUERY (zeroed, like LSE) sum_j dS_ij of
    every query row, by atomics.
    tensors, strides: kernels.backward_args (tensors moved to the document when packed); DQ is the fp32 dQ that
    ACCUM_DQ adds into."""
    HEAD_DIM: tl.constexpr = CFG.HEAD_DIM
    BLOCK_N: tl.constexpr = CFG.BLOCK_N
    BLOCK_D: tl.constexpr = CFG.BLOCK_D
    BLOCK_D2: tl.constexpr = CFG.BLOCK_D2
    BLOCK_DV: tl.constexpr = CFG.BLOCK_DV
    Q, K, V, DO, DQ = tensors.q, tensors.k, tensors.v, tensors.do, tensors.dq
    DK, DV, LSE, DELTA = tensors.dk, tensors.dv, tensors.lse, tensors.delta
    G, DG, DG_QUERY = gate
    qk_scale, sm_scale = tl.cast(qk_scale, tl.float32), tl.cast(sm_scale, tl.float32)  # fp32 loop carries whatever the caller passed
    start_n = i_n * BLOCK_N
    o_n = start_n + tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_nd = (o_n[:, None] < seq_k) & (o_d[None, :] < HEAD_DIM)
    b_k = tl.load(K + i_b * strides.k.b + i_hk * strides.k.h + o_n[:, None] * strides.k.n + o_d[None, :] * strides.k.d,
                  mask=m_nd, other=0.)  # [BN, BD]
    tl.static_assert(CFG.HEAD_DIM_V > 0, "HEAD_DIM_V, BLOCK_DV, EVEN_DV: kernels.common.head_dim_args")
    o_dv = tl.arange(0, BLOCK_DV)
    m_ndv = (o_n[:, None] < seq_k) & (o_dv[None, :] < CFG.HEAD_DIM_V)
    b_v = tl.load(V + i_b * strides.v.b + i_hk * strides.v.h + o_n[:, None] * strides.v.n + o_dv[None, :] * strides.v.d,
                  mask=m_ndv, other=0.)  # [BN, BDV]
    b_ks = b_k
    if CFG.PRESCALED:
        b_ks = (b_k * qk_scale).to(b_k.dtype)
    b_dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    b_dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    b_k2, b_v2, b_dk2 = second_chunk(K + i_b * strides.k.b + i_hk * strides.k.h, V + i_b * strides.v.b + i_hk * strides.v.h,
                                     strides.k, strides.v, o_n, o_n < seq_k, qk_scale, b_ks, b_v,
                                     HEAD_DIM, BLOCK_N, BLOCK_D, BLOCK_D2, CFG.PRESCALED)  # [BN, BD2] x 3
    b_dv2 = tl.zeros_like(b_dk2)
    for i_g in range(group):
        i_h = i_hk * group + i_g
        i_bh = i_b * heads + i_h
        G_h, DGQ_h = G, DG_QUERY
        if CFG.GATED:
            G_h = G + i_bh * stride_lse
            if CFG.ACCUM_DQ:
                DGQ_h = DG_QUERY + i_bh * stride_lse
        b_gk = gate_values(G_h, o_n, seq_k, CFG.GATED)  # [BN]
        b_dgk = tl.zeros([BLOCK_N], dtype=tl.float32)
        head = QueryHead(Q + i_b * strides.q.b + i_h * strides.q.h, DO + i_b * strides.do.b + i_h * strides.do.h,
                         LSE + i_bh * stride_lse, DELTA + i_bh * stride_lse,
                         DQ + i_b * strides.dq.b + i_h * strides.dq.h, G_h, DGQ_h)
        b_dk, b_dv, b_dk2, b_dv2, b_dgk = dkdv_over_queries(
            DkdvAcc(b_dk, b_dv, b_dk2, b_dv2, b_dgk), KeyBlock(o_n, b_ks, b_v, b_k2, b_v2, b_gk), head, strides,
            seq_q, seq_k, qk_scale, start_n, CFG)
        if CFG.GATED and CFG.GRADS != 1:
            tl.store(DG + i_bh * stride_lse + o_n, b_dgk, mask=o_n < seq_k)
    if CFG.GRADS != 1:  # not dV only
        tl.store(DK + i_b * strides.dk.b + i_hk * strides.dk.h + o_n[:, None] * strides.dk.n + o_d[None, :] * strides.dk.d,
                 (b_dk * sm_scale).to(DK.dtype.element_ty), mask=m_nd)
    if CFG.GRADS != 2:  # not dK only
        p_dv = (DV + i_b * strides.dv.b + i_hk * strides.dv.h + o_n[:, None] * strides.dv.n
                + o_dv[None, :] * strides.dv.d)
        tl.store(p_dv, b_dv.to(DV.dtype.element_ty), mask=m_ndv)  # [BN, BDV]
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_nd2 = (o_n[:, None] < seq_k) & (o_d2[None, :] < HEAD_DIM)
        if CFG.GRADS != 1:
            tl.store(DK + i_b * strides.dk.b + i_hk * strides.dk.h + o_n[:, None] * strides.dk.n + o_d2[None, :] * strides.dk.d,
                     (b_dk2 * sm_scale).to(DK.dtype.element_ty), mask=m_nd2)
        if CFG.GRADS != 2:
            tl.store(DV + i_b * strides.dv.b + i_hk * strides.dv.h + o_n[:, None] * strides.dv.n + o_d2[None, :] * strides.dv.d,
                     b_dv2.to(DV.dtype.element_ty), mask=m_nd2)
