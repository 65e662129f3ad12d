"""Constants and masking helpers shared by every kernel. Defined once, here."""
import math

import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2) == 1 / LOG2E

assert abs(LOG2E - 1.0 / math.log(2.0)) < 1e-15 and abs(LN2 - math.log(2.0)) < 1e-15


@triton.constexpr_function
def head_block(head_dim: int) -> int:
    """Register width for a head dim: the next power of two, at least 16 (tl.dot's minimum). Callable on the
    host and inside a kernel (a constexpr function)."""
    return max(16, triton.next_power_of_2(head_dim))


@triton.constexpr_function
def first_chunk(head_dim: int, block_d2: int) -> int:
    """BLOCK_D inside a kernel: the head dim's first register block, given the second one's width (head_chunks:
    the whole padded head dim when block_d2 = 0, else the largest power of two below the head dim)."""
    return head_block(head_dim) // 2 if block_d2 else head_block(head_dim)


@triton.constexpr_function
def input_precision(dtype) -> str:
    """tl.dot's input_precision for operands of this dtype: fp32 inputs get exact fp32 dots (tests); fp16/bf16 use
    the tensor cores as they are."""
    return "ieee" if dtype == tl.float32 else "tf32"


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
def document_block(VARLEN, i_p):
    """Program i_p of a varlen launch -> (its block within its document, bos_q, seq_q, bos_k, seq_k).
    VARLEN = (CU_SEQLENS_Q, CU_SEQLENS_K, BLOCK_INDICES) (kernels/varlen.py): the document starts, and
    [programs, 2] int32 (document, block) pairs. The uniform batch is the special case bos = 0, seq = the
    batch's lengths."""
    CU_SEQLENS_Q, CU_SEQLENS_K, BLOCK_INDICES = VARLEN
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


def even_blocks(seq_q: int, seq_k: int, *, walked: int, resident: int, walks_queries: bool, causal: bool,
                varlen: bool = False) -> tuple[bool, bool]:
    """(EVEN_M, EVEN_N): which sequence bounds checks a backward loop can drop (the head dim's, EVEN_D, each
    kernel derives from HEAD_DIM and its register block).

    A loop with a resident block of `resident` rows walks the other sequence in blocks of `walked`.
    Walked blocks (and the diagonal slices) stay inside the sequence when its length is a multiple
    of the block and, for a causal dK/dV walk over queries, the diagonal starts block-aligned
    (Nk - Nq and the resident key block both multiples of the query block). A packed varlen batch
    checks every sequence bound (its documents end anywhere).
    """
    if varlen:  # document lengths are arbitrary: every sequence bound is checked
        return False, False
    if walks_queries:  # dK/dV: walks queries (walked = BLOCK_M), key block resident (BLOCK_N)
        even_m = seq_q % walked == 0 and (not causal or ((seq_k - seq_q) % walked == 0 and resident % walked == 0))
        even_n = seq_k % resident == 0
    else:  # dQ: query block resident (BLOCK_M), walks keys (BLOCK_N)
        even_m = seq_q % resident == 0
        even_n = seq_k % walked == 0
    return even_m, even_n
