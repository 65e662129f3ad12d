"""Constants and masking helpers shared by every kernel. Defined once, here."""
import math

import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2) == 1 / LOG2E

assert abs(LOG2E - 1.0 / math.log(2.0)) < 1e-15 and abs(LN2 - math.log(2.0)) < 1e-15


def head_block(head_dim: int) -> int:
    """Register width for a head dim: the next power of two, at least 16 (tl.dot's minimum)."""
    return max(16, triton.next_power_of_2(head_dim))


@triton.jit
def score_mask(i_q, i_k, seq_q, seq_k, CAUSAL: tl.constexpr):
    """True where query i_q may attend key i_k; i_q, i_k are broadcastable index blocks
    ([M, 1] and [1, N] for an [M, N] score block, or the transpose for [N, M]).

    Out-of-range keys and queries are masked; causal masking is bottom-right aligned
    (FlashAttention >= 2.1): query i sees key j iff j <= i + seq_k - seq_q.
    """
    m_valid = (i_q < seq_q) & (i_k < seq_k)
    if CAUSAL:
        m_valid = m_valid & (i_k <= i_q + (seq_k - seq_q))
    return m_valid
