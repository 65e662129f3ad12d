"""The math every stock backward design shares, and the helpers of its programs (second_chunk, document_pointers).
The steps and the loops that drive them: kernels/dkdv_steps.py (a resident key block walks queries) and
kernels/dq_steps.py (a resident query block walks keys), their switches one kernels.backward_args.StepConfig.

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

from kernels.backward_args import BackwardTensors


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
def document_pointers(tensors, strides, dq_row, bos_q, bos_k):
    """The backward's pointers (kernels.backward_args: tensors, strides) moved to one varlen document: its queries
    start at token bos_q, its keys at bos_k. dq_row: DQ's row stride (strides.dq.n, or an accumulator's width)."""
    return BackwardTensors(tensors.q + bos_q * strides.q.n, tensors.k + bos_k * strides.k.n,
                           tensors.v + bos_k * strides.v.n, tensors.do + bos_q * strides.do.n, tensors.dq + bos_q * dq_row,
                           tensors.dk + bos_k * strides.dk.n, tensors.dv + bos_k * strides.dv.n, tensors.lse + bos_q,
                           tensors.delta + bos_q)
