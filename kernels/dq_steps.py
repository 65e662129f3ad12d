"""The dQ side of the shared backward steps (math and modifiers: kernels/backward_steps.py): a resident query block
walks the key blocks it sees. dq_step adds one key block, dq_walk runs it over a range of key blocks, dq_over_keys
picks the ranges (band edges, the blocks every row sees, the causal diagonal in slices) and dq_program is one
program's whole job. Compile-time switches: one kernels.backward_args.StepConfig (CFG)."""
from typing import NamedTuple

import triton
import triton.language as tl

from kernels.backward_steps import second_chunk
from kernels.common import band_blocks, gate_values, load_tile, modify_scores, score_mask, softcap_grad


class QueryBlock(NamedTuple):
    """A dQ program's resident tiles (built in the kernel)."""
    o_m: tl.tensor  # [BM] query indices
    q: tl.tensor  # [BM, BD], pre-multiplied by qk_scale when PRESCALED
    do: tl.tensor  # [BM, BDV]
    q2: tl.tensor  # [BM, BD2] the head dim's second chunk (BLOCK_D2 > 0), else an unread placeholder
    do2: tl.tensor
    lse: tl.tensor  # [BM] fp32, base 2
    delta: tl.tensor  # [BM]
    gq: tl.tensor  # [BM] the queries' gate values (GATED), else unread zeros


class DqAcc(NamedTuple):
    """The fp32 accumulators a dQ walk carries."""
    dq: tl.tensor  # [BM, BD] unscaled dS K
    dq2: tl.tensor  # [BM, BD2] (BLOCK_D2 > 0), else an unread placeholder
    dgq: tl.tensor  # [BM] sum_j dS_ij (GATED)


class KeyHead(NamedTuple):
    """One kv head's pointers, moved to its (batch, head)."""
    k: tl.tensor
    v: tl.tensor
    g: tl.tensor  # the query head's gate cumsum (GATED), else None


@triton.jit
def dq_step(acc, queries, head, strides, seq_q, seq_k, qk_scale, start_n,
            CFG: tl.constexpr, BLOCK_N: tl.constexpr, MASK_CAUSAL: tl.constexpr, BAND: tl.constexpr):
    """acc plus one key block [start_n, start_n + BLOCK_N)'s contribution to the resident queries' unscaled dQ
    (dS K; with GATED also sum_j dS_ij). MASK_CAUSAL: the block crosses the causal diagonal; BAND: it crosses a
    window edge (CFG's window mask)."""
    BLOCK_D: tl.constexpr = CFG.BLOCK_D
    BLOCK_D2: tl.constexpr = CFG.BLOCK_D2
    BLOCK_DV: tl.constexpr = CFG.BLOCK_DV
    WINDOW_LEFT: tl.constexpr = CFG.WINDOW_LEFT if BAND else -1
    WINDOW_RIGHT: tl.constexpr = CFG.WINDOW_RIGHT if BAND else -1
    b_dq, b_dq2, b_dgq = acc
    s_k, s_v = strides.k, strides.v
    o_m = queries.o_m
    o_n = start_n + tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_n = o_n[None, :] < seq_k
    m_d = o_d[:, None] < CFG.HEAD_DIM
    b_kT = load_tile(head.k + o_n[None, :] * s_k.n + o_d[:, None] * s_k.d, m_n, m_d, not CFG.EVEN_N,
                     not CFG.EVEN_D)  # [BD, BN]
    o_dv = tl.arange(0, BLOCK_DV)
    b_vT = load_tile(head.v + o_n[None, :] * s_v.n + o_dv[:, None] * s_v.d, m_n, o_dv[:, None] < CFG.HEAD_DIM_V,
                     not CFG.EVEN_N, not CFG.EVEN_DV)  # [BDV, BN]
    b_s = tl.dot(queries.q, b_kT, input_precision=CFG.DOT_PRECISION)  # [BM, BD] @ [BD, BN] -> [BM, BN]
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_d2 = o_d2[:, None] < CFG.HEAD_DIM
        b_kT2 = load_tile(head.k + o_n[None, :] * s_k.n + o_d2[:, None] * s_k.d, m_n, m_d2, not CFG.EVEN_N,
                          not CFG.EVEN_D2)  # [BD2, BN]
        b_vT2 = load_tile(head.v + o_n[None, :] * s_v.n + o_d2[:, None] * s_v.d, m_n, m_d2, not CFG.EVEN_N,
                          not CFG.EVEN_D2)  # [BD2, BN]
        b_s += tl.dot(queries.q2, b_kT2, input_precision=CFG.DOT_PRECISION)  # [BM, BD2] @ [BD2, BN]
    if not CFG.PRESCALED:
        b_s = b_s * qk_scale
    b_tanh = b_s
    if CFG.SOFTCAP > 0 or CFG.GATED:
        b_gk = gate_values(head.g, o_n, seq_k, CFG.GATED)  # [BN]
        b_s, b_tanh = modify_scores(b_s, queries.gq[:, None], b_gk[None, :], CFG.SOFTCAP, CFG.GATED)
    if MASK_CAUSAL or WINDOW_LEFT >= 0 or WINDOW_RIGHT >= 0 or not CFG.EVEN_M or not CFG.EVEN_N:
        b_s = tl.where(score_mask(o_m[:, None], o_n[None, :], seq_q, seq_k, MASK_CAUSAL, not CFG.EVEN_M,
                                  not CFG.EVEN_N, WINDOW_LEFT, WINDOW_RIGHT),
                       b_s, float("-inf"))
    b_p = tl.math.exp2(b_s - queries.lse[:, None])  # [BM, BN]
    b_dp = tl.dot(queries.do, b_vT, input_precision=CFG.DOT_PRECISION)  # [BM, BDV] @ [BDV, BN] -> [BM, BN]
    if BLOCK_D2 > 0:
        b_dp += tl.dot(queries.do2, b_vT2, input_precision=CFG.DOT_PRECISION)  # [BM, BD2] @ [BD2, BN]
    b_ds = b_p * (b_dp - queries.delta[:, None])  # [BM, BN]
    if CFG.GATED:
        b_dgq += tl.sum(b_ds, 1)  # [BM]
    b_ds = softcap_grad(b_ds, b_tanh, CFG.SOFTCAP)
    b_dq += tl.dot(b_ds.to(b_kT.dtype), tl.trans(b_kT), input_precision=CFG.DOT_PRECISION)  # [BM, BN] @ [BN, BD]
    if BLOCK_D2 > 0:
        b_dq2 += tl.dot(b_ds.to(b_kT.dtype), tl.trans(b_kT2), input_precision=CFG.DOT_PRECISION)  # -> [BM, BD2]
    return DqAcc(b_dq, b_dq2, b_dgq)


@triton.jit
def dq_walk(acc, queries, head, strides, seq_q, seq_k, qk_scale, lo, hi,
            CFG: tl.constexpr, STEP: tl.constexpr, MASK_CAUSAL: tl.constexpr, BAND: tl.constexpr):
    """acc plus the key blocks [lo, hi) in blocks of STEP keys (dq_step's MASK_CAUSAL, BAND)."""
    for start_n in range(lo, hi, STEP):
        acc = dq_step(acc, queries, head, strides, seq_q, seq_k, qk_scale, start_n, CFG, STEP, MASK_CAUSAL, BAND)
    return acc


@triton.jit
def dq_over_keys(acc, queries, head, strides, seq_q, seq_k, qk_scale, start_m, CFG: tl.constexpr):
    """Walks every key block that the query block [start_m, start_m + BLOCK_M) sees, for one head: windowed, only
    those inside the band (its two edges in slices, masked); causal, the diagonal in slices (masked), then the
    blocks every row sees; else all of them."""
    BLOCK_N: tl.constexpr = CFG.BLOCK_N
    SLICE_N: tl.constexpr = CFG.BLOCK_N // CFG.SLICE
    if CFG.WINDOW_LEFT >= 0 or CFG.WINDOW_RIGHT >= 0:
        n_lo, n_full_lo, n_full_hi, n_hi = band_blocks(start_m, seq_k, seq_k - seq_q, CFG.BLOCK_M, BLOCK_N,
                                                       CFG.WINDOW_LEFT, CFG.WINDOW_RIGHT)
        acc = dq_walk(acc, queries, head, strides, seq_q, seq_k, qk_scale, n_lo, n_full_lo, CFG, SLICE_N, False, True)
        acc = dq_walk(acc, queries, head, strides, seq_q, seq_k, qk_scale, n_full_lo, n_full_hi, CFG, BLOCK_N, False,
                      False)
        acc = dq_walk(acc, queries, head, strides, seq_q, seq_k, qk_scale, n_full_hi, n_hi, CFG, SLICE_N, False, True)
    elif CFG.CAUSAL:
        shift = seq_k - seq_q
        n_end = tl.minimum(tl.maximum(start_m + CFG.BLOCK_M + shift, 0), seq_k)  # past the last key any row sees
        n_mid = tl.minimum(tl.maximum(start_m + shift + 1, 0) // BLOCK_N * BLOCK_N, n_end)  # all rows see [0, n_mid)
        acc = dq_walk(acc, queries, head, strides, seq_q, seq_k, qk_scale, n_mid, n_end, CFG, SLICE_N, True, False)
        acc = dq_walk(acc, queries, head, strides, seq_q, seq_k, qk_scale, 0, n_mid, CFG, BLOCK_N, False, False)
    else:
        acc = dq_walk(acc, queries, head, strides, seq_q, seq_k, qk_scale, 0, seq_k, CFG, BLOCK_N, False, False)
    return acc


@triton.jit
def dq_program(tensors, strides, gate, seq_q, seq_k, stride_lse, heads, group, qk_scale, sm_scale, i_m, i_b, i_h,
               CFG: tl.constexpr):
    """dQ of query block i_m of head i_h (its kv-head is i_h // group). LSE, DELTA [B, H, stride_lse] fp32.
    BLOCK_D2 > 0: the head dim in two chunks (see dkdv_program). Modifiers (kernels/backward_steps.py): gate =
    (G, DG, unused) like LSE; DG gets sum_j dS_ij of every query i (GATED). tensors, strides: as dkdv_program (DK,
    DV are not read)."""
    HEAD_DIM: tl.constexpr = CFG.HEAD_DIM
    BLOCK_M: tl.constexpr = CFG.BLOCK_M
    BLOCK_D: tl.constexpr = CFG.BLOCK_D
    BLOCK_D2: tl.constexpr = CFG.BLOCK_D2
    BLOCK_DV: tl.constexpr = CFG.BLOCK_DV
    Q, K, V, DO, DQ = tensors.q, tensors.k, tensors.v, tensors.do, tensors.dq
    DK, DV, LSE, DELTA = tensors.dk, tensors.dv, tensors.lse, tensors.delta
    G, DG, _ = gate
    qk_scale, sm_scale = tl.cast(qk_scale, tl.float32), tl.cast(sm_scale, tl.float32)  # fp32 loop carries whatever the caller passed
    start_m = i_m * BLOCK_M
    o_m = start_m + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_m = o_m < seq_q
    m_md = m_m[:, None] & (o_d[None, :] < HEAD_DIM)
    i_bh = i_b * heads + i_h
    i_hk = i_h // group
    b_q = tl.load(Q + i_b * strides.q.b + i_h * strides.q.h + o_m[:, None] * strides.q.n + o_d[None, :] * strides.q.d,
                  mask=m_md, other=0.)  # [BM, BD]
    tl.static_assert(CFG.HEAD_DIM_V > 0, "HEAD_DIM_V, BLOCK_DV, EVEN_DV: kernels.common.head_dim_args")
    o_dv = tl.arange(0, BLOCK_DV)
    p_do = DO + i_b * strides.do.b + i_h * strides.do.h + o_m[:, None] * strides.do.n + o_dv[None, :] * strides.do.d
    b_do = tl.load(p_do, mask=m_m[:, None] & (o_dv[None, :] < CFG.HEAD_DIM_V), other=0.)  # [BM, BDV]
    b_lse = tl.load(LSE + i_bh * stride_lse + o_m, mask=m_m, other=float("inf"))  # [BM]
    b_delta = tl.load(DELTA + i_bh * stride_lse + o_m, mask=m_m, other=0.)  # [BM]
    b_qs = b_q
    if CFG.PRESCALED:
        b_qs = (b_q * qk_scale).to(b_q.dtype)
    b_dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    G_h = G
    if CFG.GATED:
        G_h = G + i_bh * stride_lse
    b_gq = gate_values(G_h, o_m, seq_q, CFG.GATED)  # [BM]
    b_dgq = tl.zeros([BLOCK_M], dtype=tl.float32)
    b_q2, b_do2, b_dq2 = second_chunk(Q + i_b * strides.q.b + i_h * strides.q.h, DO + i_b * strides.do.b + i_h * strides.do.h,
                                      strides.q, strides.do, o_m, m_m, qk_scale, b_qs, b_do,
                                      HEAD_DIM, BLOCK_M, BLOCK_D, BLOCK_D2, CFG.PRESCALED)  # [BM, BD2] x 3
    b_dq, b_dq2, b_dgq = dq_over_keys(
        DqAcc(b_dq, b_dq2, b_dgq), QueryBlock(o_m, b_qs, b_do, b_q2, b_do2, b_lse, b_delta, b_gq),
        KeyHead(K + i_b * strides.k.b + i_hk * strides.k.h, V + i_b * strides.v.b + i_hk * strides.v.h, G_h), strides,
        seq_q, seq_k, qk_scale, start_m, CFG)
    if CFG.GATED:
        tl.store(DG + i_bh * stride_lse + o_m, b_dgq, mask=m_m)
    tl.store(DQ + i_b * strides.dq.b + i_h * strides.dq.h + o_m[:, None] * strides.dq.n + o_d[None, :] * strides.dq.d,
             (b_dq * sm_scale).to(DQ.dtype.element_ty), mask=m_md)
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_md2 = m_m[:, None] & (o_d2[None, :] < HEAD_DIM)
        tl.store(DQ + i_b * strides.dq.b + i_h * strides.dq.h + o_m[:, None] * strides.dq.n + o_d2[None, :] * strides.dq.d,
                 (b_dq2 * sm_scale).to(DQ.dtype.element_ty), mask=m_md2)
