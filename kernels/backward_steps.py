"""The two inner steps of every backward design, and the causal-aware loops that drive them.

Math (natural-log softmax, scores in log2 units s2 = scale * log2(e) * q.k):
    P = exp2(s2 - lse2);  dV = P^T dO;  dP = dO V^T;  dS = P * (dP - delta);
    dQ = scale * dS K;     dK = scale * dS^T Q.
Both loops split a causal range into blocks that need the causal mask (the diagonal, walked in
slices of BLOCK / SLICE) and blocks every row fully sees. Sequence bounds are always masked.

Also here: the two kernels built on them that several designs launch (kernels/launch.py), the dK/dV pass
`_dkdv_kernel` (two_pass; atomic with GRAD_DQ) and the dQ pass `_dq_kernel` (two_pass; the deterministic modes).

Layout contract (kernels/launch.py): q, k, v, do, dq, dk, dv are [B, N, H, D] views with unit head-dim stride;
the query family (Q, DO, DQ and an fp32 dQ accumulator) shares one (batch, token, head) stride set `stride_q`,
the key family (K, V, DK, DV) another, `stride_k`. LSE and DELTA are [B, H, Nq] fp32, contiguous. Head-dim
constexprs: HEAD_DIM, and BLOCK_D2 > 0 when the head dim is held as two register blocks (kernels.common.
head_chunks); BLOCK_D, EVEN_D, EVEN_D2 and the dots' input precision are derived from them and the dtype.
GRADS (dK/dV pass): a bit set of the gradients a program computes, GRAD_DV | GRAD_DK [| GRAD_DQ].
"""
import triton
import triton.language as tl

from kernels.common import document_block, first_chunk, input_precision, load_tile, score_mask

# GRADS bits: dV (P^T dO), dK (dS^T Q), dQ (dS K added atomically). Constexpr globals, so kernels may read them;
# tested as `GRAD_DV & GRADS` (a constexpr on the left: the interpreter passes GRADS as a plain int).
GRAD_DV, GRAD_DK, GRAD_DQ = tl.constexpr(1), tl.constexpr(2), tl.constexpr(4)


@triton.jit
def dkdv_step(b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC, stride_qn,
              o_n, start_m, seq_q, seq_k, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D2: tl.constexpr,
              MASK_CAUSAL: tl.constexpr, PRESCALED: tl.constexpr, GRADS: tl.constexpr,
              EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """Adds one query block's contribution to a resident K/V block's dK, dV (and, with GRAD_DQ in GRADS,
    atomically adds the unscaled dS K to the fp32 DQ_ACC). b_k is pre-multiplied by qk_scale when PRESCALED.
    Q, DO, DQ_ACC: this head's rows (token stride stride_qn); LSE, DELTA: this head's [Nq].
    GRADS: which accumulators this program updates (GRAD_DV: no dP, dS without GRAD_DK; GRAD_DK: no P^T dO
    without GRAD_DV). BLOCK_D2 > 0: the head dim is two chunks, [0, BLOCK_D) and [BLOCK_D, BLOCK_D + BLOCK_D2)
    (b_k2, b_v2, b_dk2, b_dv2 hold the second); else the *2 arguments are unused placeholders."""
    BLOCK_D: tl.constexpr = first_chunk(HEAD_DIM, BLOCK_D2)
    EVEN_D: tl.constexpr = HEAD_DIM >= BLOCK_D  # the first chunk ends inside the head dim: no D mask
    EVEN_D2: tl.constexpr = HEAD_DIM >= BLOCK_D + BLOCK_D2
    DOT_PRECISION: tl.constexpr = input_precision(Q.dtype.element_ty)
    o_m = start_m + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_m = o_m < seq_q
    m_d = o_d < HEAD_DIM
    b_qT = load_tile(Q + o_m[None, :] * stride_qn + o_d[:, None],
                     m_m[None, :], m_d[:, None], not EVEN_M, not EVEN_D)  # [BD, BM]
    b_do = load_tile(DO + o_m[:, None] * stride_qn + o_d[None, :],
                     m_m[:, None], m_d[None, :], not EVEN_M, not EVEN_D)  # [BM, BD]
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
        b_qT2 = load_tile(Q + o_m[None, :] * stride_qn + o_d2[:, None],
                          m_m[None, :], m_d2[:, None], not EVEN_M, not EVEN_D2)  # [BD2, BM]
        b_do2 = load_tile(DO + o_m[:, None] * stride_qn + o_d2[None, :],
                          m_m[:, None], m_d2[None, :], not EVEN_M, not EVEN_D2)  # [BM, BD2]
        b_sT += tl.dot(b_k2, b_qT2, input_precision=DOT_PRECISION)  # [BN, BD2] @ [BD2, BM]
    if not PRESCALED:
        b_sT = b_sT * qk_scale
    if MASK_CAUSAL or not EVEN_M or not EVEN_N:
        b_sT = tl.where(score_mask(o_m[None, :], o_n[:, None], seq_q, seq_k, MASK_CAUSAL, not EVEN_M, not EVEN_N),
                        b_sT, float("-inf"))
    b_pT = tl.math.exp2(b_sT - b_lse[None, :])  # [BN, BM]
    if GRAD_DV & GRADS:
        b_dv += tl.dot(b_pT.to(b_do.dtype), b_do, input_precision=DOT_PRECISION)  # [BN, BM] @ [BM, BD] -> [BN, BD]
        if BLOCK_D2 > 0:
            b_dv2 += tl.dot(b_pT.to(b_do.dtype), b_do2, input_precision=DOT_PRECISION)  # [BN, BM] @ [BM, BD2]
    if GRAD_DK & GRADS:
        b_dpT = tl.dot(b_v, tl.trans(b_do), input_precision=DOT_PRECISION)  # [BN, BD] @ [BD, BM] -> [BN, BM]
        if BLOCK_D2 > 0:
            b_dpT += tl.dot(b_v2, tl.trans(b_do2), input_precision=DOT_PRECISION)  # [BN, BD2] @ [BD2, BM]
        b_dsT = b_pT * (b_dpT - b_delta[None, :])  # [BN, BM]
        b_dk += tl.dot(b_dsT.to(b_qT.dtype), tl.trans(b_qT), input_precision=DOT_PRECISION)  # [BN, BM] @ [BM, BD]
        if BLOCK_D2 > 0:
            b_dk2 += tl.dot(b_dsT.to(b_qT.dtype), tl.trans(b_qT2), input_precision=DOT_PRECISION)  # -> [BN, BD2]
    if GRAD_DQ & GRADS:  # only with dK, dV and one head-dim chunk (launch_dkdv refuses the mixes)
        b_dq = tl.dot(tl.trans(b_dsT.to(b_v.dtype)), b_k, input_precision=DOT_PRECISION)  # [BM, BN] @ [BN, BD]
        tl.atomic_add(DQ_ACC + o_m[:, None] * stride_qn + o_d[None, :], b_dq, mask=m_m[:, None] & m_d[None, :])
    return b_dk, b_dv, b_dk2, b_dv2


@triton.jit
def dkdv_over_queries(b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2, Q, DO, LSE, DELTA, DQ_ACC, stride_qn,
                      o_n, start_n, seq_q, seq_k, qk_scale,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D2: tl.constexpr,
                      SLICE: tl.constexpr, CAUSAL: tl.constexpr, PRESCALED: tl.constexpr, GRADS: tl.constexpr,
                      EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """Walks every query block that sees the key block [start_n, start_n + BLOCK_N) for one head."""
    if CAUSAL:
        SLICE_M: tl.constexpr = BLOCK_M // SLICE
        shift = seq_k - seq_q  # query i sees key j iff j <= i + shift
        m_lo = tl.maximum(start_n - shift, 0) // SLICE_M * SLICE_M  # first query that sees the block
        m_full = tl.maximum(start_n + BLOCK_N - 1 - shift, m_lo)  # first query that sees all of it
        m_mid = tl.minimum(m_lo + tl.cdiv(m_full - m_lo, SLICE_M) * SLICE_M, seq_q)
        for start_m in range(m_lo, m_mid, SLICE_M):
            b_dk, b_dv, b_dk2, b_dv2 = dkdv_step(b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2,
                                                 Q, DO, LSE, DELTA, DQ_ACC, stride_qn,
                                                 o_n, start_m, seq_q, seq_k, qk_scale,
                                                 HEAD_DIM, SLICE_M, BLOCK_D2, True, PRESCALED, GRADS, EVEN_M, EVEN_N)
        m_start = m_mid
    else:
        m_start = 0
    for start_m in range(m_start, seq_q, BLOCK_M):
        b_dk, b_dv, b_dk2, b_dv2 = dkdv_step(b_dk, b_dv, b_k, b_v, b_dk2, b_dv2, b_k2, b_v2,
                                             Q, DO, LSE, DELTA, DQ_ACC, stride_qn,
                                             o_n, start_m, seq_q, seq_k, qk_scale,
                                             HEAD_DIM, BLOCK_M, BLOCK_D2, False, PRESCALED, GRADS, EVEN_M, EVEN_N)
    return b_dk, b_dv, b_dk2, b_dv2


@triton.jit
def dq_step(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V, stride_kn,
            o_m, start_n, seq_q, seq_k, qk_scale,
            HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D2: tl.constexpr,
            MASK_CAUSAL: tl.constexpr, PRESCALED: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """Adds one key block's contribution to a resident query block's unscaled dQ (dS K).
    K, V: this kv-head's rows (token stride stride_kn). b_q is pre-multiplied by qk_scale when PRESCALED.
    BLOCK_D2 > 0: b_q2, b_do2, b_dq2 hold the head dim's second chunk [BLOCK_D, BLOCK_D + BLOCK_D2) (else
    unused placeholders)."""
    BLOCK_D: tl.constexpr = first_chunk(HEAD_DIM, BLOCK_D2)
    EVEN_D: tl.constexpr = HEAD_DIM >= BLOCK_D
    EVEN_D2: tl.constexpr = HEAD_DIM >= BLOCK_D + BLOCK_D2
    DOT_PRECISION: tl.constexpr = input_precision(K.dtype.element_ty)
    o_n = start_n + tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_n = o_n[None, :] < seq_k
    m_d = o_d[:, None] < HEAD_DIM
    b_kT = load_tile(K + o_n[None, :] * stride_kn + o_d[:, None], m_n, m_d, not EVEN_N, not EVEN_D)  # [BD, BN]
    b_vT = load_tile(V + o_n[None, :] * stride_kn + o_d[:, None], m_n, m_d, not EVEN_N, not EVEN_D)  # [BD, BN]
    b_s = tl.dot(b_q, b_kT, input_precision=DOT_PRECISION)  # [BM, BD] @ [BD, BN] -> [BM, BN]
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_d2 = o_d2[:, None] < HEAD_DIM
        b_kT2 = load_tile(K + o_n[None, :] * stride_kn + o_d2[:, None], m_n, m_d2, not EVEN_N, not EVEN_D2)  # [BD2, BN]
        b_vT2 = load_tile(V + o_n[None, :] * stride_kn + o_d2[:, None], m_n, m_d2, not EVEN_N, not EVEN_D2)  # [BD2, BN]
        b_s += tl.dot(b_q2, b_kT2, input_precision=DOT_PRECISION)  # [BM, BD2] @ [BD2, BN]
    if not PRESCALED:
        b_s = b_s * qk_scale
    if MASK_CAUSAL or not EVEN_M or not EVEN_N:
        b_s = tl.where(score_mask(o_m[:, None], o_n[None, :], seq_q, seq_k, MASK_CAUSAL, not EVEN_M, not EVEN_N),
                       b_s, float("-inf"))
    b_p = tl.math.exp2(b_s - b_lse[:, None])  # [BM, BN]
    b_dp = tl.dot(b_do, b_vT, input_precision=DOT_PRECISION)  # [BM, BD] @ [BD, BN] -> [BM, BN]
    if BLOCK_D2 > 0:
        b_dp += tl.dot(b_do2, b_vT2, input_precision=DOT_PRECISION)  # [BM, BD2] @ [BD2, BN]
    b_ds = b_p * (b_dp - b_delta[:, None])  # [BM, BN]
    b_dq += tl.dot(b_ds.to(b_kT.dtype), tl.trans(b_kT), input_precision=DOT_PRECISION)  # [BM, BN] @ [BN, BD]
    if BLOCK_D2 > 0:
        b_dq2 += tl.dot(b_ds.to(b_kT.dtype), tl.trans(b_kT2), input_precision=DOT_PRECISION)  # -> [BM, BD2]
    return b_dq, b_dq2


@triton.jit
def dq_over_keys(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V, stride_kn,
                 o_m, start_m, seq_q, seq_k, qk_scale,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D2: tl.constexpr,
                 SLICE: tl.constexpr, CAUSAL: tl.constexpr, PRESCALED: tl.constexpr,
                 EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """Walks every key block that the query block [start_m, start_m + BLOCK_M) sees, for one head."""
    if CAUSAL:
        SLICE_N: tl.constexpr = BLOCK_N // SLICE
        shift = seq_k - seq_q
        n_end = tl.minimum(tl.maximum(start_m + BLOCK_M + shift, 0), seq_k)  # past the last key any row sees
        n_mid = tl.minimum(tl.maximum(start_m + shift + 1, 0) // BLOCK_N * BLOCK_N, n_end)  # all rows see [0, n_mid)
        for start_n in range(n_mid, n_end, SLICE_N):
            b_dq, b_dq2 = dq_step(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V, stride_kn,
                                  o_m, start_n, seq_q, seq_k, qk_scale,
                                  HEAD_DIM, SLICE_N, BLOCK_D2, True, PRESCALED, EVEN_M, EVEN_N)
    else:
        n_mid = seq_k
    for start_n in range(0, n_mid, BLOCK_N):
        b_dq, b_dq2 = dq_step(b_dq, b_q, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta, K, V, stride_kn,
                              o_m, start_n, seq_q, seq_k, qk_scale,
                              HEAD_DIM, BLOCK_N, BLOCK_D2, False, PRESCALED, EVEN_M, EVEN_N)
    return b_dq, b_dq2


@triton.jit
def second_chunk(A, B, stride_n, o_r, m_r, qk_scale, b_a, b_b,
                 HEAD_DIM: tl.constexpr, ROWS: tl.constexpr, BLOCK_D2: tl.constexpr, PRESCALED: tl.constexpr):
    """A program's resident tiles of A and B (one family: token stride stride_n; rows o_r, valid where m_r) over
    the head dim's second chunk [BLOCK_D, BLOCK_D + BLOCK_D2), A pre-multiplied by qk_scale when PRESCALED, and a
    zero fp32 accumulator of that shape. With one chunk (BLOCK_D2 = 0): placeholders that are never read (b_a, b_b
    and a [16, 16] zero)."""
    if BLOCK_D2 > 0:
        BLOCK_D: tl.constexpr = first_chunk(HEAD_DIM, BLOCK_D2)
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_rd2 = m_r[:, None] & (o_d2[None, :] < HEAD_DIM)
        b_a2 = tl.load(A + o_r[:, None] * stride_n + o_d2[None, :], mask=m_rd2, other=0.)  # [R, BD2]
        b_b2 = tl.load(B + o_r[:, None] * stride_n + o_d2[None, :], mask=m_rd2, other=0.)  # [R, BD2]
        if PRESCALED:
            b_a2 = (b_a2 * qk_scale).to(b_a2.dtype)
        b_acc2 = tl.zeros([ROWS, BLOCK_D2], dtype=tl.float32)
    else:
        b_a2 = b_a
        b_b2 = b_b
        b_acc2 = tl.zeros([16, 16], dtype=tl.float32)
    return b_a2, b_b2, b_acc2


@triton.jit
def dkdv_program(Q, K, V, DO, DK, DV, LSE, DELTA, DQ_ACC, stride_q, stride_k, stride_lse,
                 seq_q, seq_k, group, qk_scale, sm_scale, i_n, i_b, i_hk,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D2: tl.constexpr,
                 SLICE: tl.constexpr, CAUSAL: tl.constexpr, PRESCALED: tl.constexpr, GRADS: tl.constexpr,
                 EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """dK, dV of key block i_n of batch i_b's kv-head i_hk, summed over the `group` query heads that share it (GQA).
    stride_q, stride_k: (batch, token, head) strides of the query and key families; LSE, DELTA [B, H, *] fp32
    with (batch, head) strides stride_lse; seq_q, seq_k: this sequence's lengths (a varlen document's).
    GRADS = GRAD_DV or GRAD_DK: only that gradient is computed and stored (a split dK/dV pass, half the
    accumulator registers); with GRAD_DQ also the atomic dQ (DQ_ACC fp32, the query family's strides).
    BLOCK_D2 > 0: the head dim in two chunks (BLOCK_D, then BLOCK_D2; no padding to the next power of two when
    HEAD_DIM = BLOCK_D + BLOCK_D2, e.g. 192 = 128 + 64)."""
    BLOCK_D: tl.constexpr = first_chunk(HEAD_DIM, BLOCK_D2)
    stride_qb, stride_qn, stride_qh = stride_q
    stride_kb, stride_kn, stride_kh = stride_k
    start_n = i_n * BLOCK_N
    o_n = start_n + tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_nd = (o_n[:, None] < seq_k) & (o_d[None, :] < HEAD_DIM)
    K += i_b * stride_kb + i_hk * stride_kh
    V += i_b * stride_kb + i_hk * stride_kh
    b_k = tl.load(K + o_n[:, None] * stride_kn + o_d[None, :], mask=m_nd, other=0.)  # [BN, BD]
    b_v = tl.load(V + o_n[:, None] * stride_kn + o_d[None, :], mask=m_nd, other=0.)  # [BN, BD]
    b_ks = b_k
    if PRESCALED:
        b_ks = (b_k * qk_scale).to(b_k.dtype)
    b_dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    b_dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    b_k2, b_v2, b_dk2 = second_chunk(K, V, stride_kn, o_n, o_n < seq_k, qk_scale, b_ks, b_v,
                                     HEAD_DIM, BLOCK_N, BLOCK_D2, PRESCALED)  # [BN, BD2] x 3
    b_dv2 = tl.zeros_like(b_dk2)
    for i_g in range(group):
        i_h = i_hk * group + i_g
        b_dk, b_dv, b_dk2, b_dv2 = dkdv_over_queries(
            b_dk, b_dv, b_ks, b_v, b_dk2, b_dv2, b_k2, b_v2,
            Q + i_b * stride_qb + i_h * stride_qh, DO + i_b * stride_qb + i_h * stride_qh,
            LSE + i_b * stride_lse[0] + i_h * stride_lse[1], DELTA + i_b * stride_lse[0] + i_h * stride_lse[1],
            DQ_ACC + i_b * stride_qb + i_h * stride_qh, stride_qn,
            o_n, start_n, seq_q, seq_k, qk_scale,
            HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D2, SLICE, CAUSAL, PRESCALED, GRADS, EVEN_M, EVEN_N)
    DK += i_b * stride_kb + i_hk * stride_kh
    DV += i_b * stride_kb + i_hk * stride_kh
    if GRAD_DK & GRADS:
        tl.store(DK + o_n[:, None] * stride_kn + o_d[None, :], (b_dk * sm_scale).to(DK.dtype.element_ty), mask=m_nd)
    if GRAD_DV & GRADS:
        tl.store(DV + o_n[:, None] * stride_kn + o_d[None, :], b_dv.to(DV.dtype.element_ty), mask=m_nd)
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_nd2 = (o_n[:, None] < seq_k) & (o_d2[None, :] < HEAD_DIM)
        if GRAD_DK & GRADS:
            tl.store(DK + o_n[:, None] * stride_kn + o_d2[None, :], (b_dk2 * sm_scale).to(DK.dtype.element_ty),
                     mask=m_nd2)
        if GRAD_DV & GRADS:
            tl.store(DV + o_n[:, None] * stride_kn + o_d2[None, :], b_dv2.to(DV.dtype.element_ty), mask=m_nd2)


@triton.jit
def dq_program(Q, K, V, DO, DQ, LSE, DELTA, stride_q, stride_k, stride_lse,
               seq_q, seq_k, group, qk_scale, sm_scale, i_m, i_b, i_h,
               HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D2: tl.constexpr,
               SLICE: tl.constexpr, CAUSAL: tl.constexpr, PRESCALED: tl.constexpr,
               EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """dQ of query block i_m of batch i_b's head i_h (its kv-head is i_h // group). Strides as dkdv_program.
    BLOCK_D2 > 0: the head dim in two chunks (see dkdv_program)."""
    BLOCK_D: tl.constexpr = first_chunk(HEAD_DIM, BLOCK_D2)
    stride_qb, stride_qn, stride_qh = stride_q
    stride_kb, stride_kn, stride_kh = stride_k
    start_m = i_m * BLOCK_M
    o_m = start_m + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_m = o_m < seq_q
    m_md = m_m[:, None] & (o_d[None, :] < HEAD_DIM)
    i_hk = i_h // group
    Q += i_b * stride_qb + i_h * stride_qh
    DO += i_b * stride_qb + i_h * stride_qh
    b_q = tl.load(Q + o_m[:, None] * stride_qn + o_d[None, :], mask=m_md, other=0.)  # [BM, BD]
    b_do = tl.load(DO + o_m[:, None] * stride_qn + o_d[None, :], mask=m_md, other=0.)  # [BM, BD]
    b_lse = tl.load(LSE + i_b * stride_lse[0] + i_h * stride_lse[1] + o_m, mask=m_m, other=float("inf"))  # [BM]
    b_delta = tl.load(DELTA + i_b * stride_lse[0] + i_h * stride_lse[1] + o_m, mask=m_m, other=0.)  # [BM]
    b_qs = b_q
    if PRESCALED:
        b_qs = (b_q * qk_scale).to(b_q.dtype)
    b_dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    b_q2, b_do2, b_dq2 = second_chunk(Q, DO, stride_qn, o_m, m_m, qk_scale, b_qs, b_do,
                                      HEAD_DIM, BLOCK_M, BLOCK_D2, PRESCALED)  # [BM, BD2] x 3
    b_dq, b_dq2 = dq_over_keys(b_dq, b_qs, b_do, b_dq2, b_q2, b_do2, b_lse, b_delta,
                               K + i_b * stride_kb + i_hk * stride_kh, V + i_b * stride_kb + i_hk * stride_kh, stride_kn,
                               o_m, start_m, seq_q, seq_k, qk_scale,
                               HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D2, SLICE, CAUSAL, PRESCALED, EVEN_M, EVEN_N)
    DQ += i_b * stride_qb + i_h * stride_qh
    tl.store(DQ + o_m[:, None] * stride_qn + o_d[None, :], (b_dq * sm_scale).to(DQ.dtype.element_ty), mask=m_md)
    if BLOCK_D2 > 0:
        o_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        m_md2 = m_m[:, None] & (o_d2[None, :] < HEAD_DIM)
        tl.store(DQ + o_m[:, None] * stride_qn + o_d2[None, :], (b_dq2 * sm_scale).to(DQ.dtype.element_ty),
                 mask=m_md2)


@triton.jit
def _dkdv_kernel(Q, K, V, DO, DQ, DK, DV, LSE, DELTA, stride_q, stride_k,
                 seq_q, seq_k, heads, kv_heads, qk_scale, sm_scale, VARLEN,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D2: tl.constexpr,
                 CAUSAL: tl.constexpr, LONGEST_FIRST: tl.constexpr, PRESCALED: tl.constexpr, GRADS: tl.constexpr,
                 EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """Writes dK, dV [B, Nk, Hkv, D] (GRADS: GRAD_DV | GRAD_DK, or one of them in a split pass); with GRAD_DQ
    (the atomic design) it also adds the unscaled dS K into the fp32 DQ (else DQ is not read).
    Grid (cdiv(Nk, BLOCK_N), B * Hkv), or (B * Hkv, cdiv(Nk, BLOCK_N)) with LONGEST_FIRST: programs are
    dispatched x-fastest, so every head's key block 0 (the most queries when causal) starts first and the
    last wave holds the shortest programs. VARLEN (None, or kernels.varlen's (CU_SEQLENS_Q, CU_SEQLENS_K,
    BLOCK_INDICES)): B = 1 and the blocks axis runs over the (document, key block) pairs of BLOCK_INDICES (with
    LONGEST_FIRST sorted heaviest first across documents)."""
    IS_VARLEN: tl.constexpr = VARLEN is not None
    if LONGEST_FIRST:
        i_n = tl.program_id(1)
        i_bhk = tl.program_id(0)
    else:
        i_n = tl.program_id(0)
        i_bhk = tl.program_id(1)
    stride_lse = (heads * seq_q, seq_q)  # LSE, DELTA [B, H, Nq] (varlen: [1, H, total_q])
    if IS_VARLEN:
        i_n, bos_q, seq_q, bos_k, seq_k = document_block(VARLEN, i_n)
        Q, DO, DQ = Q + bos_q * stride_q[1], DO + bos_q * stride_q[1], DQ + bos_q * stride_q[1]
        K, V, DK, DV = K + bos_k * stride_k[1], V + bos_k * stride_k[1], DK + bos_k * stride_k[1], DV + bos_k * stride_k[1]
        LSE, DELTA = LSE + bos_q, DELTA + bos_q
    dkdv_program(Q, K, V, DO, DK, DV, LSE, DELTA, DQ, stride_q, stride_k, stride_lse,
                 seq_q, seq_k, heads // kv_heads, qk_scale, sm_scale, i_n, i_bhk // kv_heads, i_bhk % kv_heads,
                 HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D2, 1, CAUSAL, PRESCALED, GRADS, EVEN_M, EVEN_N)


@triton.jit
def _dq_kernel(Q, K, V, DO, DQ, LSE, DELTA, stride_q, stride_k,
               seq_q, seq_k, heads, kv_heads, qk_scale, sm_scale, VARLEN,
               HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D2: tl.constexpr,
               CAUSAL: tl.constexpr, LONGEST_FIRST: tl.constexpr, PRESCALED: tl.constexpr,
               EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """Writes dQ [B, Nq, H, D]. Grid (cdiv(Nq, BLOCK_M), B * H), or (B * H, cdiv(Nq, BLOCK_M)) with
    LONGEST_FIRST: every head's last query block (the most keys when causal) is dispatched first. VARLEN: B = 1
    and the blocks axis runs over the (document, query block) pairs of BLOCK_INDICES (with LONGEST_FIRST
    already heaviest first)."""
    IS_VARLEN: tl.constexpr = VARLEN is not None
    if LONGEST_FIRST:
        i_m = tl.program_id(1) if IS_VARLEN else tl.num_programs(1) - 1 - tl.program_id(1)
        i_bh = tl.program_id(0)
    else:
        i_m = tl.program_id(0)
        i_bh = tl.program_id(1)
    stride_lse = (heads * seq_q, seq_q)  # LSE, DELTA [B, H, Nq] (varlen: [1, H, total_q])
    if IS_VARLEN:
        i_m, bos_q, seq_q, bos_k, seq_k = document_block(VARLEN, i_m)
        Q, DO, DQ = Q + bos_q * stride_q[1], DO + bos_q * stride_q[1], DQ + bos_q * stride_q[1]
        K, V = K + bos_k * stride_k[1], V + bos_k * stride_k[1]
        LSE, DELTA = LSE + bos_q, DELTA + bos_q
    dq_program(Q, K, V, DO, DQ, LSE, DELTA, stride_q, stride_k, stride_lse,
               seq_q, seq_k, heads // kv_heads, qk_scale, sm_scale, i_m, i_bh // heads, i_bh % heads,
               HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D2, 1, CAUSAL, PRESCALED, EVEN_M, EVEN_N)
