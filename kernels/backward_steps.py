"""The two inner steps of every backward design, and the causal-aware loops that drive them.

Math (natural-log softmax, scores in log2 units s2 = scale * log2(e) * q.k):
    P = exp2(s2 - lse2);  dV = P^T dO;  dP = dO V^T;  dS = P * (dP - delta);
    dQ = scale * dS K;     dK = scale * dS^T Q.
V, dO and dV have a head dim of their own (HEAD_DIM_V, in registers BLOCK_DV, EVEN_DV: it ends at HEAD_DIM_V; MLA's
D = 192, Dv = 128); with the head dim in two chunks (BLOCK_D2 > 0) the two are equal (kernels.common.head_dim_args).
Both loops split a causal range into blocks that need the causal mask (the diagonal, walked in
slices of BLOCK / SLICE) and blocks every row fully sees. Sequence bounds are always masked.
Score modifiers (issue 24; kernels.common, all constexpr-gated, off by default): a sliding window
(WINDOW_LEFT / WINDOW_RIGHT >= 0: both loops walk only the blocks inside the band, kernels.common.band_blocks,
masking its two edges), softcap (SOFTCAP > 0: dS is multiplied by 1 - tanh^2) and the forget gate (GATED:
scores + G_i - G_j, with G [B, H, N] in LSE's layout; the dQ loop writes sum_j dS_ij per query to DG, the
dK/dV loop sum_i dS_ij per key, kernels.gate turns them into dg).
"""
import triton
import triton.language as tl

from kernels.common import band_blocks, gate_values, load_tile, modify_scores, score_mask, softcap_grad


@triton.jit
def dkdv_step(b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC,
              s_q, s_do, s_dq,
              o_n, start_m, seq_q, seq_k, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
              MASK_CAUSAL: tl.constexpr, PRESCALED: tl.constexpr, ACCUM_DQ: tl.constexpr,
              EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
              GRADS: tl.constexpr, BLOCK_D2: tl.constexpr, EVEN_D2: tl.constexpr,
              G, b_gk, b_dgk, DGQ, WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
              GATED: tl.constexpr,
              HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, EVEN_DV: tl.constexpr):
    """Adds one query block's contribution to a resident K/V block's dK, dV (and, with ACCUM_DQ,
    atomically adds the unscaled dS K to the fp32 DQ_ACC). b_k is pre-multiplied by qk_scale when PRESCALED.
    GRADS: which accumulators this program updates: 1 dV only (no dP, dS), 2 dK only (no P^T dO), 3 both.
    BLOCK_D2 > 0: the head dim is two chunks, [0, BLOCK_D) and [BLOCK_D, BLOCK_D + BLOCK_D2) (b_k2, b_v2, b_dk2,
    b_dv2 hold the second; EVEN_D2: it ends at HEAD_DIM); else the *2 arguments are unused placeholders.
    Modifiers: the window mask where WINDOW_LEFT / WINDOW_RIGHT >= 0, SOFTCAP, GATED (G the head's gate cumsum,
    b_gk [BN] the resident keys' values; b_dgk [BN] accumulates sum_i dS_ij; with ACCUM_DQ, DGQ the head's per-query
    sums, fp32 like LSE, gets sum_j dS_ij atomically)."""
    o_m = start_m + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_m = o_m < seq_q
    m_d = o_d < HEAD_DIM
    b_qT = load_tile(Q + o_m[None, :] * s_q.n + o_d[:, None] * s_q.d,
                     m_m[None, :], m_d[:, None], not EVEN_M, not EVEN_D)  # [BD, BM]
    o_dv = tl.arange(0, BLOCK_DV)
    b_do = load_tile(DO + o_m[:, None] * s_do.n + o_dv[None, :] * s_do.d,
                     m_m[:, None], o_dv[None, :] < HEAD_DIM_V, not EVEN_M, not EVEN_DV)  # [BM, BDV]
    if EVEN_M:
        b_lse = tl.load(LSE + o_m)  # [BM]
        b_delta = tl.load(DELTA + o_m)  # [BM]
    else:
        b_lse = tl.load(LSE + o_m, mask=m_m, other=float("inf"))  # padded rows: P = 0
        b_delta = tl.load(DELTA + o_m, mask=m_m, other=0.)

    b_sT = tl.dot(b_k, b_qT, input_precision=DOT_PRECISION)  # [BN, BD] @ [BD, BM] -> [BN, BM]
    if BLOCK_D2 > 0:  # the head dim's second chunk
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_d2 = o_d2 < HEAD_DIM
        b_qT2 = load_tile(Q + o_m[None, :] * s_q.n + o_d2[:, None] * s_q.d,
                          m_m[None, :], m_d2[:, None], not EVEN_M, not EVEN_D2)  # [BD2, BM]
        b_do2 = load_tile(DO + o_m[:, None] * s_do.n + o_d2[None, :] * s_do.d,
                          m_m[:, None], m_d2[None, :], not EVEN_M, not EVEN_D2)  # [BM, BD2]
        b_sT += tl.dot(b_k2, b_qT2, input_precision=DOT_PRECISION)  # [BN, BD2] @ [BD2, BM]
    if not PRESCALED:
        b_sT = b_sT * qk_scale
    b_tanhT = b_sT
    if SOFTCAP > 0 or GATED:
        b_gq = gate_values(G, o_m, seq_q, GATED)  # [BM]
        b_sT, b_tanhT = modify_scores(b_sT, b_gq[None, :], b_gk[:, None], SOFTCAP, GATED)
    if MASK_CAUSAL or WINDOW_LEFT >= 0 or WINDOW_RIGHT >= 0 or not EVEN_M or not EVEN_N:
        b_sT = tl.where(score_mask(o_m[None, :], o_n[:, None], seq_q, seq_k, MASK_CAUSAL, not EVEN_M, not EVEN_N,
                                   WINDOW_LEFT, WINDOW_RIGHT),
                        b_sT, float("-inf"))
    b_pT = tl.math.exp2(b_sT - b_lse[None, :])  # [BN, BM]
    if GRADS != 2:  # not dK only
        b_dv += tl.dot(b_pT.to(b_do.dtype), b_do, input_precision=DOT_PRECISION)  # [BN, BM] @ [BM, BDV] -> [BN, BDV]
        if BLOCK_D2 > 0:
            b_dv2 += tl.dot(b_pT.to(b_do.dtype), b_do2, input_precision=DOT_PRECISION)  # [BN, BM] @ [BM, BD2]
    if GRADS != 1:  # not dV only
        b_dpT = tl.dot(b_v, tl.trans(b_do), input_precision=DOT_PRECISION)  # [BN, BDV] @ [BDV, BM] -> [BN, BM]
        if BLOCK_D2 > 0:
            b_dpT += tl.dot(b_v2, tl.trans(b_do2), input_precision=DOT_PRECISION)  # [BN, BD2] @ [BD2, BM]
        b_dsT = b_pT * (b_dpT - b_delta[None, :])  # [BN, BM]
        if GATED:
            b_dgk += tl.sum(b_dsT, 1)  # [BN]
            if ACCUM_DQ:  # the query half from the same dS (kernels/gate.py: the two halves must cancel exactly)
                tl.atomic_add(DGQ + o_m, tl.sum(b_dsT, 0), mask=m_m, sem="relaxed")  # [BM]
        b_dsT = softcap_grad(b_dsT, b_tanhT, SOFTCAP)
        b_dk += tl.dot(b_dsT.to(b_qT.dtype), tl.trans(b_qT), input_precision=DOT_PRECISION)  # [BN, BM] @ [BM, BD]
        if BLOCK_D2 > 0:
            b_dk2 += tl.dot(b_dsT.to(b_qT.dtype), tl.trans(b_qT2), input_precision=DOT_PRECISION)  # -> [BN, BD2]
    if ACCUM_DQ:  # only with GRADS = 3 and one head-dim chunk (launch_dkdv refuses the mixes)
        b_dq = tl.dot(tl.trans(b_dsT.to(b_v.dtype)), b_k, input_precision=DOT_PRECISION)  # [BM, BN] @ [BN, BD]
        tl.atomic_add(DQ_ACC + o_m[:, None] * s_dq.n + o_d[None, :] * s_dq.d, b_dq,
                      mask=m_m[:, None] & m_d[None, :])
    return b_dk, b_dv, b_dk2, b_dv2, b_dgk


@triton.jit
def dkdv_over_queries(b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC,
                      s_q, s_do, s_dq,
                      o_n, start_n, seq_q, seq_k, qk_scale,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_D: tl.constexpr, SLICE: tl.constexpr, CAUSAL: tl.constexpr,
                      PRESCALED: tl.constexpr, ACCUM_DQ: tl.constexpr,
                      EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
                      GRADS: tl.constexpr, BLOCK_D2: tl.constexpr, EVEN_D2: tl.constexpr,
                      G, b_gk, b_dgk, DGQ, WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                      GATED: tl.constexpr,
              HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, EVEN_DV: tl.constexpr):
    """Walks every query block that sees the key block [start_n, start_n + BLOCK_N) for one head (windowed: only
    those inside the band)."""
    if WINDOW_LEFT >= 0 or WINDOW_RIGHT >= 0:
        SLICE_W: tl.constexpr = BLOCK_M // SLICE
        m_lo, m_full_lo, m_full_hi, m_hi = band_blocks(start_n, seq_q, seq_q - seq_k, BLOCK_N, BLOCK_M,
                                                       WINDOW_RIGHT, WINDOW_LEFT)
        for start_m in range(m_lo, m_full_lo, SLICE_W):  # the band's early edge: masked
            b_dk, b_dv, b_dk2, b_dv2, b_dgk = dkdv_step(
                b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC,
                s_q, s_do, s_dq, o_n, start_m, seq_q, seq_k,
                qk_scale, HEAD_DIM, SLICE_W, BLOCK_D, False, PRESCALED, ACCUM_DQ, EVEN_M, EVEN_N, EVEN_D,
                DOT_PRECISION, GRADS, BLOCK_D2, EVEN_D2, G, b_gk, b_dgk, DGQ, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, GATED,
                HEAD_DIM_V, BLOCK_DV, EVEN_DV)
        for start_m in range(m_full_lo, m_full_hi, BLOCK_M):  # inside the band: no band mask
            b_dk, b_dv, b_dk2, b_dv2, b_dgk = dkdv_step(
                b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC,
                s_q, s_do, s_dq, o_n, start_m, seq_q, seq_k,
                qk_scale, HEAD_DIM, BLOCK_M, BLOCK_D, False, PRESCALED, ACCUM_DQ, EVEN_M, EVEN_N, EVEN_D,
                DOT_PRECISION, GRADS, BLOCK_D2, EVEN_D2, G, b_gk, b_dgk, DGQ, -1, -1, SOFTCAP, GATED,
                HEAD_DIM_V, BLOCK_DV, EVEN_DV)
        for start_m in range(m_full_hi, m_hi, SLICE_W):  # the band's late edge: masked
            b_dk, b_dv, b_dk2, b_dv2, b_dgk = dkdv_step(
                b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC,
                s_q, s_do, s_dq, o_n, start_m, seq_q, seq_k,
                qk_scale, HEAD_DIM, SLICE_W, BLOCK_D, False, PRESCALED, ACCUM_DQ, EVEN_M, EVEN_N, EVEN_D,
                DOT_PRECISION, GRADS, BLOCK_D2, EVEN_D2, G, b_gk, b_dgk, DGQ, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, GATED,
                HEAD_DIM_V, BLOCK_DV, EVEN_DV)
    else:
        b_dk, b_dv, b_dk2, b_dv2, b_dgk = dkdv_over_causal(
            b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC,
            s_q, s_do, s_dq, o_n, start_n, seq_q, seq_k, qk_scale,
            HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, SLICE, CAUSAL, PRESCALED, ACCUM_DQ, EVEN_M, EVEN_N, EVEN_D,
            DOT_PRECISION, GRADS, BLOCK_D2, EVEN_D2, G, b_gk, b_dgk, DGQ, SOFTCAP, GATED,
            HEAD_DIM_V, BLOCK_DV, EVEN_DV)
    return b_dk, b_dv, b_dk2, b_dv2, b_dgk


@triton.jit
def dkdv_over_causal(b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC,
                     s_q, s_do, s_dq,
                     o_n, start_n, seq_q, seq_k, qk_scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_D: tl.constexpr, SLICE: tl.constexpr, CAUSAL: tl.constexpr,
                     PRESCALED: tl.constexpr, ACCUM_DQ: tl.constexpr,
                     EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
                     GRADS: tl.constexpr, BLOCK_D2: tl.constexpr, EVEN_D2: tl.constexpr,
                     G, b_gk, b_dgk, DGQ, SOFTCAP: tl.constexpr, GATED: tl.constexpr,
              HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, EVEN_DV: tl.constexpr):
    """dkdv_over_queries without a window: every query block from the causal diagonal on (or all of them)."""
    if CAUSAL:
        SLICE_M: tl.constexpr = BLOCK_M // SLICE
        shift = seq_k - seq_q  # query i sees key j iff j <= i + shift
        m_lo = tl.maximum(start_n - shift, 0) // SLICE_M * SLICE_M  # first query that sees the block
        m_full = tl.maximum(start_n + BLOCK_N - 1 - shift, m_lo)  # first query that sees all of it
        m_mid = tl.minimum(m_lo + tl.cdiv(m_full - m_lo, SLICE_M) * SLICE_M, seq_q)
        for start_m in range(m_lo, m_mid, SLICE_M):
            b_dk, b_dv, b_dk2, b_dv2, b_dgk = dkdv_step(b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC,
                                   s_q, s_do, s_dq,
                                   o_n, start_m, seq_q, seq_k, qk_scale,
                                   HEAD_DIM, SLICE_M, BLOCK_D, True, PRESCALED, ACCUM_DQ,
                                   EVEN_M, EVEN_N, EVEN_D, DOT_PRECISION, GRADS, BLOCK_D2, EVEN_D2,
                                   G, b_gk, b_dgk, DGQ, -1, -1, SOFTCAP, GATED,
                                   HEAD_DIM_V, BLOCK_DV, EVEN_DV)
        m_start = m_mid
    else:
        m_start = 0
    for start_m in range(m_start, seq_q, BLOCK_M):
        b_dk, b_dv, b_dk2, b_dv2, b_dgk = dkdv_step(b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC,
                               s_q, s_do, s_dq,
                               o_n, start_m, seq_q, seq_k, qk_scale,
                               HEAD_DIM, BLOCK_M, BLOCK_D, False, PRESCALED, ACCUM_DQ,
                               EVEN_M, EVEN_N, EVEN_D, DOT_PRECISION, GRADS, BLOCK_D2, EVEN_D2,
                               G, b_gk, b_dgk, DGQ, -1, -1, SOFTCAP, GATED,
                               HEAD_DIM_V, BLOCK_DV, EVEN_DV)
    return b_dk, b_dv, b_dk2, b_dv2, b_dgk


@triton.jit
def dq_step(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V, s_k, s_v,
            o_m, start_n, seq_q, seq_k, qk_scale,
            HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
            MASK_CAUSAL: tl.constexpr, PRESCALED: tl.constexpr,
            EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
            BLOCK_D2: tl.constexpr, EVEN_D2: tl.constexpr,
            G, b_gq, b_dgq, WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
            GATED: tl.constexpr,
              HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, EVEN_DV: tl.constexpr):
    """Adds one key block's contribution to a resident query block's unscaled dQ (dS K).
    b_q is pre-multiplied by qk_scale when PRESCALED. BLOCK_D2 > 0: b_q2, b_do2, b_dq2 hold the head dim's
    second chunk [BLOCK_D, BLOCK_D + BLOCK_D2) (else unused placeholders). Modifiers: the window mask where
    WINDOW_LEFT / WINDOW_RIGHT >= 0, SOFTCAP, GATED (G the head's gate cumsum, b_gq [BM] the resident queries'
    values; b_dgq [BM] accumulates sum_j dS_ij)."""
    o_n = start_n + tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_n = o_n[None, :] < seq_k
    m_d = o_d[:, None] < HEAD_DIM
    b_kT = load_tile(K + o_n[None, :] * s_k.n + o_d[:, None] * s_k.d, m_n, m_d, not EVEN_N, not EVEN_D)  # [BD, BN]
    o_dv = tl.arange(0, BLOCK_DV)
    b_vT = load_tile(V + o_n[None, :] * s_v.n + o_dv[:, None] * s_v.d, m_n, o_dv[:, None] < HEAD_DIM_V,
                     not EVEN_N, not EVEN_DV)  # [BDV, BN]
    b_s = tl.dot(b_q, b_kT, input_precision=DOT_PRECISION)  # [BM, BD] @ [BD, BN] -> [BM, BN]
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_d2 = o_d2[:, None] < HEAD_DIM
        b_kT2 = load_tile(K + o_n[None, :] * s_k.n + o_d2[:, None] * s_k.d, m_n, m_d2, not EVEN_N, not EVEN_D2)  # [BD2, BN]
        b_vT2 = load_tile(V + o_n[None, :] * s_v.n + o_d2[:, None] * s_v.d, m_n, m_d2, not EVEN_N, not EVEN_D2)  # [BD2, BN]
        b_s += tl.dot(b_q2, b_kT2, input_precision=DOT_PRECISION)  # [BM, BD2] @ [BD2, BN]
    if not PRESCALED:
        b_s = b_s * qk_scale
    b_tanh = b_s
    if SOFTCAP > 0 or GATED:
        b_gk = gate_values(G, o_n, seq_k, GATED)  # [BN]
        b_s, b_tanh = modify_scores(b_s, b_gq[:, None], b_gk[None, :], SOFTCAP, GATED)
    if MASK_CAUSAL or WINDOW_LEFT >= 0 or WINDOW_RIGHT >= 0 or not EVEN_M or not EVEN_N:
        b_s = tl.where(score_mask(o_m[:, None], o_n[None, :], seq_q, seq_k, MASK_CAUSAL, not EVEN_M, not EVEN_N,
                                  WINDOW_LEFT, WINDOW_RIGHT),
                       b_s, float("-inf"))
    b_p = tl.math.exp2(b_s - b_lse[:, None])  # [BM, BN]
    b_dp = tl.dot(b_do, b_vT, input_precision=DOT_PRECISION)  # [BM, BDV] @ [BDV, BN] -> [BM, BN]
    if BLOCK_D2 > 0:
        b_dp += tl.dot(b_do2, b_vT2, input_precision=DOT_PRECISION)  # [BM, BD2] @ [BD2, BN]
    b_ds = b_p * (b_dp - b_delta[:, None])  # [BM, BN]
    if GATED:
        b_dgq += tl.sum(b_ds, 1)  # [BM]
    b_ds = softcap_grad(b_ds, b_tanh, SOFTCAP)
    b_dq += tl.dot(b_ds.to(b_kT.dtype), tl.trans(b_kT), input_precision=DOT_PRECISION)  # [BM, BN] @ [BN, BD]
    if BLOCK_D2 > 0:
        b_dq2 += tl.dot(b_ds.to(b_kT.dtype), tl.trans(b_kT2), input_precision=DOT_PRECISION)  # -> [BM, BD2]
    return b_dq, b_dq2, b_dgq


@triton.jit
def dq_over_keys(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V, s_k, s_v,
                 o_m, start_m, seq_q, seq_k, qk_scale,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_D: tl.constexpr, SLICE: tl.constexpr, CAUSAL: tl.constexpr, PRESCALED: tl.constexpr,
                 EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
                 BLOCK_D2: tl.constexpr, EVEN_D2: tl.constexpr,
                 G, b_gq, b_dgq, WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                 GATED: tl.constexpr,
              HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, EVEN_DV: tl.constexpr):
    """Walks every key block that the query block [start_m, start_m + BLOCK_M) sees, for one head (windowed: only
    those inside the band)."""
    if WINDOW_LEFT >= 0 or WINDOW_RIGHT >= 0:
        SLICE_W: tl.constexpr = BLOCK_N // SLICE
        n_lo, n_full_lo, n_full_hi, n_hi = band_blocks(start_m, seq_k, seq_k - seq_q, BLOCK_M, BLOCK_N,
                                                       WINDOW_LEFT, WINDOW_RIGHT)
        for start_n in range(n_lo, n_full_lo, SLICE_W):  # the band's early edge: masked
            b_dq, b_dq2, b_dgq = dq_step(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V,
                                         s_k, s_v, o_m, start_n, seq_q, seq_k,
                                         qk_scale, HEAD_DIM, SLICE_W, BLOCK_D, False, PRESCALED, EVEN_M, EVEN_N,
                                         EVEN_D, DOT_PRECISION, BLOCK_D2, EVEN_D2,
                                         G, b_gq, b_dgq, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, GATED,
                                         HEAD_DIM_V, BLOCK_DV, EVEN_DV)
        for start_n in range(n_full_lo, n_full_hi, BLOCK_N):  # inside the band: no band mask
            b_dq, b_dq2, b_dgq = dq_step(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V,
                                         s_k, s_v, o_m, start_n, seq_q, seq_k,
                                         qk_scale, HEAD_DIM, BLOCK_N, BLOCK_D, False, PRESCALED, EVEN_M, EVEN_N,
                                         EVEN_D, DOT_PRECISION, BLOCK_D2, EVEN_D2,
                                         G, b_gq, b_dgq, -1, -1, SOFTCAP, GATED,
                                         HEAD_DIM_V, BLOCK_DV, EVEN_DV)
        for start_n in range(n_full_hi, n_hi, SLICE_W):  # the band's late edge: masked
            b_dq, b_dq2, b_dgq = dq_step(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V,
                                         s_k, s_v, o_m, start_n, seq_q, seq_k,
                                         qk_scale, HEAD_DIM, SLICE_W, BLOCK_D, False, PRESCALED, EVEN_M, EVEN_N,
                                         EVEN_D, DOT_PRECISION, BLOCK_D2, EVEN_D2,
                                         G, b_gq, b_dgq, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, GATED,
                                         HEAD_DIM_V, BLOCK_DV, EVEN_DV)
    else:
        b_dq, b_dq2, b_dgq = dq_over_causal(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V,
                                            s_k, s_v, o_m, start_m, seq_q, seq_k,
                                            qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, SLICE, CAUSAL, PRESCALED,
                                            EVEN_M, EVEN_N, EVEN_D, DOT_PRECISION, BLOCK_D2, EVEN_D2,
                                            G, b_gq, b_dgq, SOFTCAP, GATED,
                                            HEAD_DIM_V, BLOCK_DV, EVEN_DV)
    return b_dq, b_dq2, b_dgq


@triton.jit
def dq_over_causal(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V, s_k, s_v,
                   o_m, start_m, seq_q, seq_k, qk_scale,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr, SLICE: tl.constexpr, CAUSAL: tl.constexpr, PRESCALED: tl.constexpr,
                   EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
                   BLOCK_D2: tl.constexpr, EVEN_D2: tl.constexpr, G, b_gq, b_dgq, SOFTCAP: tl.constexpr,
                   GATED: tl.constexpr,
              HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, EVEN_DV: tl.constexpr):
    """dq_over_keys without a window: every key block up to the causal diagonal (or all of them)."""
    if CAUSAL:
        SLICE_N: tl.constexpr = BLOCK_N // SLICE
        shift = seq_k - seq_q
        n_end = tl.minimum(tl.maximum(start_m + BLOCK_M + shift, 0), seq_k)  # past the last key any row sees
        n_mid = tl.minimum(tl.maximum(start_m + shift + 1, 0) // BLOCK_N * BLOCK_N, n_end)  # all rows see [0, n_mid)
        for start_n in range(n_mid, n_end, SLICE_N):
            b_dq, b_dq2, b_dgq = dq_step(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V,
                                  s_k, s_v, o_m, start_n, seq_q, seq_k, qk_scale,
                                  HEAD_DIM, SLICE_N, BLOCK_D, True, PRESCALED, EVEN_M, EVEN_N, EVEN_D, DOT_PRECISION,
                                  BLOCK_D2, EVEN_D2, G, b_gq, b_dgq, -1, -1, SOFTCAP, GATED,
                                  HEAD_DIM_V, BLOCK_DV, EVEN_DV)
    else:
        n_mid = seq_k
    for start_n in range(0, n_mid, BLOCK_N):
        b_dq, b_dq2, b_dgq = dq_step(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V,
                              s_k, s_v, o_m, start_n, seq_q, seq_k, qk_scale,
                              HEAD_DIM, BLOCK_N, BLOCK_D, False, PRESCALED, EVEN_M, EVEN_N, EVEN_D, DOT_PRECISION,
                              BLOCK_D2, EVEN_D2, G, b_gq, b_dgq, -1, -1, SOFTCAP, GATED,
                              HEAD_DIM_V, BLOCK_DV, EVEN_DV)
    return b_dq, b_dq2, b_dgq


@triton.jit
def second_chunk(A, B, s_a, s_b, o_r, m_r, qk_scale, b_a, b_b,
                 HEAD_DIM: tl.constexpr, ROWS: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_D2: tl.constexpr,
                 PRESCALED: tl.constexpr):
    """A program's resident tiles of A and B (rows o_r, valid where m_r) over the head dim's second chunk
    [BLOCK_D, BLOCK_D + BLOCK_D2), A pre-multiplied by qk_scale when PRESCALED, and a zero fp32 accumulator of
    that shape. With one chunk (BLOCK_D2 = 0): placeholders that are never read (b_a, b_b and a [16, 16] zero)."""
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_rd2 = m_r[:, None] & (o_d2[None, :] < HEAD_DIM)
        b_a2 = tl.load(A + o_r[:, None] * s_a.n + o_d2[None, :] * s_a.d, mask=m_rd2, other=0.)  # [R, BD2]
        b_b2 = tl.load(B + o_r[:, None] * s_b.n + o_d2[None, :] * s_b.d, mask=m_rd2, other=0.)  # [R, BD2]
        if PRESCALED:
            b_a2 = (b_a2 * qk_scale).to(b_a2.dtype)
        b_acc2 = tl.zeros([ROWS, BLOCK_D2], dtype=tl.float32)
    else:
        b_a2 = b_a
        b_b2 = b_b
        b_acc2 = tl.zeros([16, 16], dtype=tl.float32)
    return b_a2, b_b2, b_acc2


@triton.jit
def dkdv_program(tensors, strides, seq_q, seq_k, stride_lse, heads, group, qk_scale, sm_scale, i_n, i_b, i_hk,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_D: tl.constexpr, SLICE: tl.constexpr, CAUSAL: tl.constexpr,
                 PRESCALED: tl.constexpr, ACCUM_DQ: tl.constexpr,
                 EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
                 GRADS: tl.constexpr = 3, BLOCK_D2: tl.constexpr = 0, EVEN_D2: tl.constexpr = True,
                 G=None, DG=None, WINDOW_LEFT: tl.constexpr = -1, WINDOW_RIGHT: tl.constexpr = -1,
                 SOFTCAP: tl.constexpr = 0.0, GATED: tl.constexpr = False, DG_QUERY=None,
                 HEAD_DIM_V: tl.constexpr = -1, BLOCK_DV: tl.constexpr = -1, EVEN_DV: tl.constexpr = True):
    """dK, dV of key block i_n of kv-head i_hk, summed over the `group` query heads that share it (GQA).
    LSE, DELTA [B, H, stride_lse] fp32; seq_q, seq_k: this sequence's lengths (a varlen document's).
    GRADS = 1 (dV) or 2 (dK): only that gradient is computed and stored (a split dK/dV pass, half the
    accumulator registers). BLOCK_D2 > 0: the head dim in two chunks (BLOCK_D, then BLOCK_D2; no padding to
    the next power of two when HEAD_DIM = BLOCK_D + BLOCK_D2, e.g. 192 = 128 + 64). Modifiers (module doc): G, DG
    [B, H, stride_lse] fp32 like LSE; DG gets sum_i dS_ij of every key j and query head (GATED, GRADS != 1), and
    with ACCUM_DQ DG_QUERY (zeroed, like LSE) sum_j dS_ij of every query row, by atomics.
    tensors, strides: kernels.backward_args (tensors moved to the document when packed); DQ is the fp32 dQ that
    ACCUM_DQ adds into."""
    Q, K, V, DO, DQ, DK, DV, LSE, DELTA = tensors
    qk_scale, sm_scale = tl.cast(qk_scale, tl.float32), tl.cast(sm_scale, tl.float32)  # fp32 loop carries whatever the caller passed
    start_n = i_n * BLOCK_N
    o_n = start_n + tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_nd = (o_n[:, None] < seq_k) & (o_d[None, :] < HEAD_DIM)
    b_k = tl.load(K + i_b * strides.k.b + i_hk * strides.k.h + o_n[:, None] * strides.k.n + o_d[None, :] * strides.k.d,
                  mask=m_nd, other=0.)  # [BN, BD]
    tl.static_assert(HEAD_DIM_V > 0, "HEAD_DIM_V, BLOCK_DV, EVEN_DV: kernels.common.head_dim_args")
    o_dv = tl.arange(0, BLOCK_DV)
    m_ndv = (o_n[:, None] < seq_k) & (o_dv[None, :] < HEAD_DIM_V)
    b_v = tl.load(V + i_b * strides.v.b + i_hk * strides.v.h + o_n[:, None] * strides.v.n + o_dv[None, :] * strides.v.d,
                  mask=m_ndv, other=0.)  # [BN, BDV]
    b_ks = b_k
    if PRESCALED:
        b_ks = (b_k * qk_scale).to(b_k.dtype)
    b_dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    b_dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    b_k2, b_v2, b_dk2 = second_chunk(K + i_b * strides.k.b + i_hk * strides.k.h, V + i_b * strides.v.b + i_hk * strides.v.h,
                                     strides.k, strides.v, o_n, o_n < seq_k, qk_scale, b_ks, b_v,
                                     HEAD_DIM, BLOCK_N, BLOCK_D, BLOCK_D2, PRESCALED)  # [BN, BD2] x 3
    b_dv2 = tl.zeros_like(b_dk2)
    for i_g in range(group):
        i_h = i_hk * group + i_g
        i_bh = i_b * heads + i_h
        G_h, DGQ_h = G, DG_QUERY
        if GATED:
            G_h = G + i_bh * stride_lse
            if ACCUM_DQ:
                DGQ_h = DG_QUERY + i_bh * stride_lse
        b_gk = gate_values(G_h, o_n, seq_k, GATED)  # [BN]
        b_dgk = tl.zeros([BLOCK_N], dtype=tl.float32)
        b_dk, b_dv, b_dk2, b_dv2, b_dgk = dkdv_over_queries(
            b_dk, b_dv, b_ks, b_v, b_dk2, b_dv2, b_k2, b_v2,
            Q + i_b * strides.q.b + i_h * strides.q.h, DO + i_b * strides.do.b + i_h * strides.do.h,
            LSE + i_bh * stride_lse, DELTA + i_bh * stride_lse, DQ + i_b * strides.dq.b + i_h * strides.dq.h,
            strides.q, strides.do, strides.dq, o_n, start_n, seq_q, seq_k, qk_scale,
            HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, SLICE, CAUSAL, PRESCALED, ACCUM_DQ,
            EVEN_M, EVEN_N, EVEN_D, DOT_PRECISION, GRADS, BLOCK_D2, EVEN_D2,
            G_h, b_gk, b_dgk, DGQ_h, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, GATED,
            HEAD_DIM_V, BLOCK_DV, EVEN_DV)
        if GATED and GRADS != 1:
            tl.store(DG + i_bh * stride_lse + o_n, b_dgk, mask=o_n < seq_k)
    if GRADS != 1:  # not dV only
        tl.store(DK + i_b * strides.dk.b + i_hk * strides.dk.h + o_n[:, None] * strides.dk.n + o_d[None, :] * strides.dk.d,
                 (b_dk * sm_scale).to(DK.dtype.element_ty), mask=m_nd)
    if GRADS != 2:  # not dK only
        p_dv = (DV + i_b * strides.dv.b + i_hk * strides.dv.h + o_n[:, None] * strides.dv.n
                + o_dv[None, :] * strides.dv.d)
        tl.store(p_dv, b_dv.to(DV.dtype.element_ty), mask=m_ndv)  # [BN, BDV]
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_nd2 = (o_n[:, None] < seq_k) & (o_d2[None, :] < HEAD_DIM)
        if GRADS != 1:
            tl.store(DK + i_b * strides.dk.b + i_hk * strides.dk.h + o_n[:, None] * strides.dk.n + o_d2[None, :] * strides.dk.d,
                     (b_dk2 * sm_scale).to(DK.dtype.element_ty), mask=m_nd2)
        if GRADS != 2:
            tl.store(DV + i_b * strides.dv.b + i_hk * strides.dv.h + o_n[:, None] * strides.dv.n + o_d2[None, :] * strides.dv.d,
                     b_dv2.to(DV.dtype.element_ty), mask=m_nd2)


@triton.jit
def dq_program(tensors, strides, seq_q, seq_k, stride_lse, heads, group, qk_scale, sm_scale, i_m, i_b, i_h,
               HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_D: tl.constexpr, SLICE: tl.constexpr, CAUSAL: tl.constexpr, PRESCALED: tl.constexpr,
               EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
               BLOCK_D2: tl.constexpr = 0, EVEN_D2: tl.constexpr = True,
               G=None, DG=None, WINDOW_LEFT: tl.constexpr = -1, WINDOW_RIGHT: tl.constexpr = -1,
               SOFTCAP: tl.constexpr = 0.0, GATED: tl.constexpr = False,
               HEAD_DIM_V: tl.constexpr = -1, BLOCK_DV: tl.constexpr = -1, EVEN_DV: tl.constexpr = True):
    """dQ of query block i_m of head i_h (its kv-head is i_h // group). LSE, DELTA [B, H, stride_lse] fp32.
    BLOCK_D2 > 0: the head dim in two chunks (see dkdv_program). Modifiers (module doc): G, DG like LSE; DG gets
    sum_j dS_ij of every query i (GATED). tensors, strides: as dkdv_program (DK, DV are not read)."""
    Q, K, V, DO, DQ, DK, DV, LSE, DELTA = tensors
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
    tl.static_assert(HEAD_DIM_V > 0, "HEAD_DIM_V, BLOCK_DV, EVEN_DV: kernels.common.head_dim_args")
    o_dv = tl.arange(0, BLOCK_DV)
    p_do = DO + i_b * strides.do.b + i_h * strides.do.h + o_m[:, None] * strides.do.n + o_dv[None, :] * strides.do.d
    b_do = tl.load(p_do, mask=m_m[:, None] & (o_dv[None, :] < HEAD_DIM_V), other=0.)  # [BM, BDV]
    b_lse = tl.load(LSE + i_bh * stride_lse + o_m, mask=m_m, other=float("inf"))  # [BM]
    b_delta = tl.load(DELTA + i_bh * stride_lse + o_m, mask=m_m, other=0.)  # [BM]
    b_qs = b_q
    if PRESCALED:
        b_qs = (b_q * qk_scale).to(b_q.dtype)
    b_dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    G_h = G
    if GATED:
        G_h = G + i_bh * stride_lse
    b_gq = gate_values(G_h, o_m, seq_q, GATED)  # [BM]
    b_dgq = tl.zeros([BLOCK_M], dtype=tl.float32)
    b_q2, b_do2, b_dq2 = second_chunk(Q + i_b * strides.q.b + i_h * strides.q.h, DO + i_b * strides.do.b + i_h * strides.do.h,
                                      strides.q, strides.do, o_m, m_m, qk_scale, b_qs, b_do,
                                      HEAD_DIM, BLOCK_M, BLOCK_D, BLOCK_D2, PRESCALED)  # [BM, BD2] x 3
    b_dq, b_dq2, b_dgq = dq_over_keys(b_dq, b_qs, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta,
                        K + i_b * strides.k.b + i_hk * strides.k.h, V + i_b * strides.v.b + i_hk * strides.v.h,
                        strides.k, strides.v, o_m, start_m, seq_q, seq_k, qk_scale,
                        HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, SLICE, CAUSAL, PRESCALED,
                        EVEN_M, EVEN_N, EVEN_D, DOT_PRECISION, BLOCK_D2, EVEN_D2,
                        G_h, b_gq, b_dgq, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, GATED,
                        HEAD_DIM_V, BLOCK_DV, EVEN_DV)
    if GATED:
        tl.store(DG + i_bh * stride_lse + o_m, b_dgq, mask=m_m)
    tl.store(DQ + i_b * strides.dq.b + i_h * strides.dq.h + o_m[:, None] * strides.dq.n + o_d[None, :] * strides.dq.d,
             (b_dq * sm_scale).to(DQ.dtype.element_ty), mask=m_md)
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_md2 = m_m[:, None] & (o_d2[None, :] < HEAD_DIM)
        tl.store(DQ + i_b * strides.dq.b + i_h * strides.dq.h + o_m[:, None] * strides.dq.n + o_d2[None, :] * strides.dq.d,
                 (b_dq2 * sm_scale).to(DQ.dtype.element_ty), mask=m_md2)


@triton.jit
def document_pointers(tensors, strides, dq_row, bos_q, bos_k):
    """The backward's pointers (kernels.backward_args: tensors, strides) moved to one varlen document: its queries
    start at token bos_q, its keys at bos_k. dq_row: DQ's row stride (strides.dq.n, or an accumulator's width)."""
    Q, K, V, DO, DQ, DK, DV, LSE, DELTA = tensors
    return (Q + bos_q * strides.q.n, K + bos_k * strides.k.n, V + bos_k * strides.v.n, DO + bos_q * strides.do.n,
            DQ + bos_q * dq_row, DK + bos_k * strides.dk.n, DV + bos_k * strides.dv.n, LSE + bos_q, DELTA + bos_q)
