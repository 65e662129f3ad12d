"""Constants and masking helpers shared by every kernel. Defined once, here."""
import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2) == 1 / LOG2E

assert abs(LOG2E - 1.0 / math.log(2.0)) < 1e-15 and abs(LN2 - math.log(2.0)) < 1e-15
LOG2E_C: tl.constexpr = tl.constexpr(LOG2E)  # the same, readable inside @triton.jit code


class Strides(NamedTuple):
    """A [B, N, H, D] tensor's strides, in elements; one kernel argument (Triton passes a tuple leaf by leaf)."""
    b: int
    n: int
    h: int
    d: int


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) of host integers. triton.cdiv is a constexpr function in Triton 3.9, a few microseconds per host
    call (issue 44: the launchers' host time); inside kernels use tl.cdiv."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """triton.next_power_of_2 of a host integer n >= 1, in plain Python (see cdiv)."""
    return 1 << (n - 1).bit_length() if n >= 1 else triton.next_power_of_2(n)


def strides(t: torch.Tensor) -> Strides:
    """Strides of a [B, N, H, D] view, in elements (any memory layout)."""
    return Strides(*t.stride())


def flat(t: torch.Tensor) -> bool:
    """Whether t's elements are exactly its storage's first numel elements (a kernel may then walk them as one
    block from the data pointer): no storage offset and the strides of a permuted contiguous tensor."""
    if t.storage_offset():
        return False
    if t.is_contiguous():  # the common case: no Python loop
        return True
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride()), key=lambda p: p[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def head_block(head_dim: int) -> int:
    """Register width for a head dim: the next power of two, at least 16 (tl.dot's minimum)."""
    return max(16, next_power_of_2(head_dim))


def head_chunks(head_dim: int, split: bool) -> tuple[int, int]:
    """(BLOCK_D, BLOCK_D2): the head dim as one power-of-two register block (BLOCK_D2 = 0), or with split, as two
    (the largest power of two below it, then the rest rounded up) when that pads less: 192 -> (128, 64),
    96 -> (64, 32), 80 -> (64, 16); a power of two, or a head dim the split would not shrink, stays one block."""
    whole = head_block(head_dim)
    if not split or head_dim == whole:
        return whole, 0
    first = whole // 2
    second = max(16, next_power_of_2(head_dim - first))
    return (first, second) if first + second < whole else (whole, 0)


def head_dim_args(head_dim: int, split: bool, head_dim_v: int | None = None) -> dict:
    """The head-dim constexprs of a kernel built on kernels.backward_steps: HEAD_DIM, its register blocks
    (head_chunks) and whether each block ends exactly at HEAD_DIM (EVEN_D: the first, EVEN_D2: the second; a
    block that does not end there masks its loads and stores along D); HEAD_DIM_V, BLOCK_DV, EVEN_DV the same for
    V, dO and dV. A value head dim of its own (head_dim_v != head_dim, issue 47) is one register block each and
    no split (the split's second chunk covers K and V together)."""
    if head_dim_v is not None and head_dim_v != head_dim:
        block_d, block_dv = head_block(head_dim), head_block(head_dim_v)
        return dict(HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_D2=0, EVEN_D=head_dim == block_d, EVEN_D2=True,
                    HEAD_DIM_V=head_dim_v, BLOCK_DV=block_dv, EVEN_DV=head_dim_v == block_dv)
    block_d, block_d2 = head_chunks(head_dim, split)
    even_d = block_d2 > 0 or head_dim == block_d
    return dict(HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_D2=block_d2,
                EVEN_D=even_d, EVEN_D2=block_d2 == 0 or head_dim == block_d + block_d2,
                HEAD_DIM_V=head_dim, BLOCK_DV=block_d, EVEN_DV=even_d)


@triton.jit
def score_mask(i_q, i_k, seq_q, seq_k, CAUSAL: tl.constexpr, CHECK_Q: tl.constexpr, CHECK_K: tl.constexpr,
               WINDOW_LEFT: tl.constexpr = -1, WINDOW_RIGHT: tl.constexpr = -1):
    """True where query i_q may attend key i_k; i_q, i_k are broadcastable index blocks
    ([M, 1] and [1, N] for an [M, N] score block, or the transpose for [N, M]).

    Causal masking is bottom-right aligned (FlashAttention >= 2.1): query i sees key j iff
    j <= i + seq_k - seq_q. CHECK_Q / CHECK_K also mask out-of-range queries / keys; a caller
    whose blocks all lie inside the sequence passes False (and then needs no mask at all when
    not causal: `needs_score_mask`). A sliding window (WINDOW_LEFT / WINDOW_RIGHT >= 0, FlashAttention's
    window_size; -1 = unbounded) also needs i + seq_k - seq_q - WINDOW_LEFT <= j <= i + seq_k - seq_q + WINDOW_RIGHT.
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
    if WINDOW_LEFT >= 0:
        m_valid = m_valid & (i_k >= i_q + (seq_k - seq_q) - WINDOW_LEFT)
    if WINDOW_RIGHT >= 0:
        m_valid = m_valid & (i_k <= i_q + (seq_k - seq_q) + WINDOW_RIGHT)
    return m_valid


@triton.jit
def band_blocks(start_r, seq_w, offset, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr,
                BEFORE: tl.constexpr, AFTER: tl.constexpr):
    """The blocks a windowed loop walks. Resident rows [start_r, start_r + BLOCK_R) see walked index w (of seq_w)
    iff r + offset - BEFORE <= w <= r + offset + AFTER (-1 = unbounded). -> (lo, full_lo, full_hi, hi), lo,
    full_lo and full_hi multiples of BLOCK_W (or hi): the loop walks [lo, hi), every block outside it fully
    masked and skipped; [full_lo, full_hi) every resident row sees whole (no band mask), [lo, full_lo) and
    [full_hi, hi) need it. dQ (rows = queries): offset = Nk - Nq, BEFORE = left, AFTER = right;
    dK/dV (rows = keys): offset = Nq - Nk, BEFORE = right, AFTER = left."""
    last_r = start_r + BLOCK_R - 1
    if BEFORE >= 0:
        lo = tl.maximum(start_r + offset - BEFORE, 0) // BLOCK_W * BLOCK_W
        full_lo = tl.cdiv(tl.maximum(last_r + offset - BEFORE, lo), BLOCK_W) * BLOCK_W  # every row sees from here
    else:
        lo = 0
        full_lo = 0
    if AFTER >= 0:
        hi = tl.minimum(tl.maximum(last_r + offset + AFTER + 1, 0), seq_w)
        full_hi = tl.maximum(start_r + offset + AFTER + 1, 0) // BLOCK_W * BLOCK_W  # every row sees up to here
    else:
        hi = seq_w
        full_hi = seq_w
    full_lo = tl.minimum(full_lo, hi)
    full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def gate_values(G, o_r, seq, GATED: tl.constexpr):
    """fp32 G (the forget gate's cumsum, moved to the head's row) at positions o_r (0 past seq), or zeros that nothing
    reads when not GATED (G may then be None)."""
    if GATED:
        b_g = tl.load(G + o_r, mask=o_r < seq, other=0.)
    else:
        b_g = tl.zeros(o_r.shape, dtype=tl.float32)
    return b_g


@triton.jit
def tanh(x):
    """tanh from exp2, accurate near 0 and saturating at +-1 (the interpreter and every GPU run it). The quotient is
    the approximate division (div.full.f32, 2 ulp: a reciprocal and a multiply), not IEEE division's ~10
    instructions and slow path; the Gluon kernels' `gluon_tanh` divides the same way, so forward and backward agree."""
    e = tl.math.exp2(tl.abs(x) * (-2.0 * LOG2E_C))
    t = tl.fdiv(1.0 - e, 1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def modify_scores(b_s, g_q, g_k, SOFTCAP: tl.constexpr, GATED: tl.constexpr):
    """Scores in log2 units (s2 = log2(e) * s) -> (modified scores, tanh(s / softcap) for `modifier_grad`; b_s when
    there is no softcap). SOFTCAP > 0: s -> softcap * tanh(s / softcap); GATED: s -> s + G_q - G_k (g_q, g_k
    broadcast to b_s). Masks come after (tanh would turn -inf into -softcap)."""
    b_tanh = b_s
    if SOFTCAP > 0:
        b_tanh = tanh(b_s * (1.0 / (SOFTCAP * LOG2E_C)))
        b_s = b_tanh * (SOFTCAP * LOG2E_C)
    if GATED:
        b_s = b_s + (g_q - g_k) * LOG2E_C
    return b_s, b_tanh


@triton.jit
def softcap_grad(b_ds, b_tanh, SOFTCAP: tl.constexpr):
    """dS with respect to the capped score -> with respect to the scaled score s (d tanh = 1 - tanh^2)."""
    if SOFTCAP > 0:
        b_ds = b_ds * (1.0 - b_tanh * b_tanh)
    return b_ds


@triton.jit
def block_and_head(LONGEST_FIRST: tl.constexpr, REVERSED: tl.constexpr = False):
    """(block, head) ids of this program: grid (blocks, heads), or (heads, blocks) with LONGEST_FIRST, so the x-fastest
    dispatch starts every head's first block before any head's second. REVERSED (with LONGEST_FIRST): blocks numbered
    last first (the dQ kernel: its last query block sees the most keys when causal)."""
    if LONGEST_FIRST:
        if REVERSED:
            i_block = tl.num_programs(1) - 1 - tl.program_id(1)
        else:
            i_block = tl.program_id(1)
        i_head = tl.program_id(0)
    else:
        i_block = tl.program_id(0)
        i_head = tl.program_id(1)
    return i_block, i_head


@triton.jit
def document_block(docs, i_p):
    """Program i_p of a varlen launch -> (its block within its document, bos_q, seq_q, bos_k, seq_k).
    docs: kernels.varlen.Documents, BLOCK_INDICES [programs, 2] int32 holds (document, block) pairs, CU_SEQLENS_*
    the document starts. The uniform batch is the special case bos = 0, seq = the batch's lengths."""
    CU_SEQLENS_Q, CU_SEQLENS_K, BLOCK_INDICES = docs
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


def modifier_args(mods=None, gated: bool = False, causal: bool = False) -> dict:
    """The modifier constexprs of a kernel built on these helpers (mods: variants.problem.Modifiers or None; all
    off by default). A causal window has WINDOW_RIGHT = 0 (the windowed loops then walk the causal band too)."""
    left, right = (-1, -1) if mods is None else (mods.window_left, mods.window_right)
    if causal and (left >= 0 or right >= 0):
        right = 0
    return dict(WINDOW_LEFT=left, WINDOW_RIGHT=right, SOFTCAP=0.0 if mods is None else float(mods.softcap),
                GATED=gated)


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
