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


def head_chunks(head_dim: int, split: bool) -> tuple[int, int]:
    """(BLOCK_D, BLOCK_D2): the head dim as one power-of-two register block (BLOCK_D2 = 0), or with split, as two
    (the largest power of two below it, then the rest rounded up) when that pads less: 192 -> (128, 64),
    96 -> (64, 32), 80 -> (64, 16); a power of two, or a head dim the split would not shrink, stays one block."""
    whole = head_block(head_dim)
    if not split or head_dim == whole:
        return whole, 0
    first = whole // 2
    second = max(16, triton.next_power_of_2(head_dim - first))
    return (first, second) if first + second < whole else (whole, 0)


def head_dim_args(head_dim: int, split: bool) -> dict:
    """The head-dim constexprs of a kernel built on kernels.backward_steps: HEAD_DIM, its register blocks
    (head_chunks) and whether each block ends exactly at HEAD_DIM (EVEN_D: the first, EVEN_D2: the second; a
    block that does not end there masks its loads and stores along D)."""
    block_d, block_d2 = head_chunks(head_dim, split)
    return dict(HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_D2=block_d2,
                EVEN_D=block_d2 > 0 or head_dim == block_d, EVEN_D2=block_d2 == 0 or head_dim == block_d + block_d2)


@triton.jit
def score_mask(i_q, i_k, seq_q, seq_k, CAUSAL: tl.constexpr, CHECK_Q: tl.constexpr, CHECK_K: tl.constexpr):
    """True where query i_q may attend key i_k; i_q, i_k are broadcastable index blocks
    ([M, 1] and [1, N] for an [M, N] score block, or the transpose for [N, M]).

    Causal masking is bottom-right aligned (FlashAttention >= 2.1): query i sees key j iff
    j <= i + seq_k - seq_q. CHECK_Q / CHECK_K also mask out-of-range queries / keys; a caller
    whose blocks all lie inside the sequence passes False (and then needs no mask at all when
    not causal: `needs_score_mask`).
    """
    if CAUSAL:
        m_valid = i_k <= i_q + (seq_k - seq_q)
        if CHECK_Q:
            m_valid = m_valid & (i_q < seq_q)
        if CHECK_K:
            m_valid = m_valid & (i_k < seq_k)
    elif CHECK_Q:
        m_valid = i_q < seq_q
        if CHECK_K:
            m_valid = m_valid & (i_k < seq_k)
    else:
        m_valid = i_k < seq_k
    return m_valid


@triton.jit
def document_block(BLOCK_INDICES, CU_SEQLENS_Q, CU_SEQLENS_K, i_p):
    """Program i_p of a varlen launch -> (its block within its document, bos_q, seq_q, bos_k, seq_k):
    BLOCK_INDICES [programs, 2] int32 holds (document, block) pairs (kernels/varlen.py), CU_SEQLENS_* the
    document starts. The uniform batch is the special case bos = 0, seq = the batch's lengths."""
    i_doc = tl.load(BLOCK_INDICES + 2 * i_p)
    i_blk = tl.load(BLOCK_INDICES + 2 * i_p + 1)
    bos_q = tl.load(CU_SEQLENS_Q + i_doc)
    bos_k = tl.load(CU_SEQLENS_K + i_doc)
    seq_q = tl.load(CU_SEQLENS_Q + i_doc + 1) - bos_q
    seq_k = tl.load(CU_SEQLENS_K + i_doc + 1) - bos_k
    return i_blk, bos_q, seq_q, bos_k, seq_k


@triton.jit
def load_tile(pointers, m_rows, m_cols, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr):
    """tl.load with only the masks a tile needs (zeros outside); m_rows / m_cols broadcast to the tile."""
    if CHECK_ROWS:
        if CHECK_COLS:
            tile = tl.load(pointers, mask=m_rows & m_cols, other=0.)
        else:
            tile = tl.load(pointers, mask=m_rows, other=0.)
    elif CHECK_COLS:
        tile = tl.load(pointers, mask=m_cols, other=0.)
    else:
        tile = tl.load(pointers)
    return tile


def even_blocks(seq_q: int, seq_k: int, head_dim: int, block_d: int, *, walked: int, resident: int,
                walks_queries: bool, causal: bool, varlen: bool = False) -> tuple[bool, bool, bool]:
    """(EVEN_M, EVEN_N, EVEN_D): which bounds checks a backward loop can drop.

    A loop with a resident block of `resident` rows walks the other sequence in blocks of `walked`.
    Walked blocks (and the diagonal slices) stay inside the sequence when its length is a multiple
    of the block and, for a causal dK/dV walk over queries, the diagonal starts block-aligned
    (Nk - Nq and the resident key block both multiples of the query block). A packed varlen batch
    checks every sequence bound (its documents end anywhere).
    """
    if varlen:  # document lengths are arbitrary: every sequence bound is checked
        return False, False, head_dim == block_d
    if walks_queries:  # dK/dV: walks queries (walked = BLOCK_M), key block resident (BLOCK_N)
        even_m = seq_q % walked == 0 and (not causal or ((seq_k - seq_q) % walked == 0 and resident % walked == 0))
        even_n = seq_k % resident == 0
    else:  # dQ: query block resident (BLOCK_M), walks keys (BLOCK_N)
        even_m = seq_q % resident == 0
        even_n = seq_k % walked == 0
    return even_m, even_n, head_dim == block_d
