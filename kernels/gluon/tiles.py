"""The Gluon building blocks both ws kernels use (kernels/gluon/ws.py's dK/dV/dQ kernel, kernels/gluon/ws_dq.py's dQ
kernel): head-dim chunks and TMA views of dense [B, N, H, D] tensors on the host; in the kernels, the packed-document
lookup, the softmax probabilities with their masks and modifiers, chunked wgmma issue / wait (the stores are in
kernels/gluon/epilogue.py).

A head dim that is no power of two runs in two chunks (`head_dim_chunks`: 192 = 128 + 64; 96 = 64 + 32 with the
block field head_dim_split), so no wgmma reads the tiles' zero columns; an accumulator is then a tuple of chunks
(`chunk_zeros`, `mma_chunks`, epilogue's `store_chunks`).
"""
import functools
from typing import NamedTuple

import torch
import triton

from kernels.common import LOG2E, next_power_of_2
from kernels.gluon.compat import TensorDescriptor, gl, gluon, warpgroup_mma, warpgroup_mma_wait

GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}
LOG2E_C = gl.constexpr(LOG2E)  # log2(e), readable inside the kernels (softcap)
MIN_CHUNK = 64  # the narrowest second head-dim chunk (one 128-byte swizzle row of 16-bit elements)
NARROW_CHUNK = 32  # head_dim_split=true: the narrowest second chunk (96 = 64 + 32; issue 43)


class WsDocs(NamedTuple):  # VARLEN: the packed documents (kernels.varlen.Packing)
    cu_q: object  # [documents + 1] int32: cu_seqlens_q
    cu_k: object  # [documents + 1] int32: cu_seqlens_k
    pairs: object  # [pairs, 2] int32: (document, key block)


class WsScales(NamedTuple):  # the softmax scale (ws_dq's kernel)
    qk_scale: float  # scale * log2(e): S to exp2's units
    sm_scale: float  # scale: dK's


@gluon.jit
def document_pair(pair, PAIRS, CU_Q, CU_K):
    """A packed batch's (document, block) pair (kernels.varlen.Packing.block_indices) -> (document, block, its first
    query row, its first key row, its query and key lengths)."""
    doc = gl.load(PAIRS + 2 * pair)
    block = gl.load(PAIRS + 2 * pair + 1)
    q_row0 = gl.load(CU_Q + doc)
    k_row0 = gl.load(CU_K + doc)
    return doc, block, q_row0, k_row0, gl.load(CU_Q + doc + 1) - q_row0, gl.load(CU_K + doc + 1) - k_row0


@gluon.jit
def as_box(tile):
    """A shared tile [R, C] as the [R, 1, C] box of a [rows, heads, D] TMA view (the same bytes)."""
    return tile.reshape([tile.shape[0], 1, tile.shape[1]])


@gluon.jit
def head_chunks(tile, rest, D_MAIN: gl.constexpr, D_REST: gl.constexpr, CHUNKED: gl.constexpr):
    """A D-wide shared tile's two head-dim chunks: (tile, rest) as they are (CHUNKED: chunk tiles, each its own
    tile), else tile's column slices [:, :D_MAIN] and [:, D_MAIN:D_MAIN + D_REST] (rest unused)."""
    if CHUNKED:
        return tile, rest
    else:
        return tile.slice(0, D_MAIN, 1), tile.slice(D_MAIN, D_REST, 1)


@gluon.jit
def issue_product(a, b, LAYOUT: gl.constexpr, D_MAIN: gl.constexpr = 0, D_REST: gl.constexpr = 0, a_r=0, b_r=0,
                  CHUNKED: gl.constexpr = False):
    """a b^T ([R, D] @ [D, C] -> [R, C]) as one async wgmma group, or (D_REST > 0: a head dim D_MAIN + D_REST that
    is no power of two) one per chunk of the reduction, so no MMA reads the tiles' zero columns past D. CHUNKED: the
    second chunks are the tiles a_r, b_r (chunk tiles), else column slices of a, b."""
    # the accumulator made here (use_acc=False ignores it), so no zero tile stays live across steps
    acc_shape: gl.constexpr = [a.shape[0], b.shape[0]]
    if D_REST > 0:
        a0, a1 = head_chunks(a, a_r, D_MAIN, D_REST, CHUNKED)
        b0, b1 = head_chunks(b, b_r, D_MAIN, D_REST, CHUNKED)
        acc = warpgroup_mma(a0, b0.permute((1, 0)), gl.zeros(acc_shape, gl.float32, LAYOUT), use_acc=False,
                            is_async=True)
        acc = warpgroup_mma(a1, b1.permute((1, 0)), acc, is_async=True)
    else:
        acc = warpgroup_mma(a, b.permute((1, 0)), gl.zeros(acc_shape, gl.float32, LAYOUT), use_acc=False,
                            is_async=True)
    return acc


@gluon.jit
def chunk_zeros(rows: gl.constexpr, LAYOUT: gl.constexpr, LAYOUT_R: gl.constexpr, D_MAIN: gl.constexpr,
                 D_REST: gl.constexpr):
    """A [rows, D] fp32 accumulator as a tuple of head-dim chunks: ([rows, D_MAIN],) or, D_REST > 0,
    ([rows, D_MAIN], [rows, D_REST])."""
    if D_REST > 0:
        return (gl.zeros([rows, D_MAIN], gl.float32, LAYOUT), gl.zeros([rows, D_REST], gl.float32, LAYOUT_R))
    else:
        return (gl.zeros([rows, D_MAIN], gl.float32, LAYOUT),)


@gluon.jit
def mma_chunks(a, a_r, b, acc, D_MAIN: gl.constexpr, D_REST: gl.constexpr, use_acc: gl.constexpr = True, b_r=0,
               CHUNKED: gl.constexpr = False):
    """acc[c] += a @ b[:, chunk c] for each head-dim chunk of the accumulator tuple (`chunk_zeros`); b [K, D] in
    shared memory (CHUNKED: its second chunk is the tile b_r); a (chunk 0) and a_r (chunk 1): the same A operand, in
    registers laid out for each chunk's accumulator, or one shared tile. One async wgmma group per chunk."""
    if D_REST > 0:
        b0, b1 = head_chunks(b, b_r, D_MAIN, D_REST, CHUNKED)
        return (warpgroup_mma(a, b0, acc[0], use_acc=use_acc, is_async=True),
                warpgroup_mma(a_r, b1, acc[1], use_acc=use_acc, is_async=True))
    else:
        return (warpgroup_mma(a, b, acc[0], use_acc=use_acc, is_async=True),)


@gluon.jit
def wait_chunks(n: gl.constexpr, x, y, D_REST: gl.constexpr):
    """warpgroup_mma_wait(num_outstanding=n) on two chunk tuples -> (x, y)."""
    if D_REST > 0:
        x0, x1, y0, y1 = warpgroup_mma_wait(num_outstanding=n, deps=(x[0], x[1], y[0], y[1]))
        return (x0, x1), (y0, y1)
    else:
        x0, y0 = warpgroup_mma_wait(num_outstanding=n, deps=(x[0], y[0]))
        return (x0,), (y0,)


@gluon.jit
def probabilities(s, lse, o_m, start_n, start_m, seq_q, seq_k, qk_scale, KEYS_ON_ROWS: gl.constexpr,
                  CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr,
                  MASKED: gl.constexpr, KEY_BLOCK_FIXED: gl.constexpr = False):
    """P = exp2(S * scale * log2 e - LSE) of S^T [BN, BM] (KEYS_ON_ROWS, swap AB) or S [BM, BN]; o_m: the query
    index of each query row / column. Only blocks that cross the causal diagonal, a window edge or a sequence end
    pay for the mask (keys past Nk, queries past Nq, keys right of the bottom-right diagonal under causal masking,
    and outside the window (WINDOW_LEFT / WINDOW_RIGHT >= 0, FlashAttention's window_size) -> 0).
    KEY_BLOCK_FIXED: the caller walks query blocks against one key block (ws's compute warps), so the mask's key
    indices are built per step (issue 43: not hoisted out of the loop and held in registers, spilled, across it)."""
    KEY_DIM: gl.constexpr = 0 if KEYS_ON_ROWS else 1
    QUERY_DIM: gl.constexpr = 1 - KEY_DIM
    BLOCK_N: gl.constexpr = s.shape[KEY_DIM]
    BLOCK_M: gl.constexpr = s.shape[QUERY_DIM]
    s = s * qk_scale  # log2 units
    t = s  # tanh(s / softcap): a placeholder without softcap (never read)
    if SOFTCAP > 0:  # s -> softcap * tanh(s / softcap), in log2 units (kernels.common.modify_scores)
        t = gluon_tanh(s * (1.0 / (SOFTCAP * LOG2E_C)))
        s = t * (SOFTCAP * LOG2E_C)
    p = gl.exp2(s - gl.expand_dims(lse, KEY_DIM))
    if MASKED:
        shift = seq_k - seq_q  # bottom-right causal: query i sees key j iff j <= i + shift
        right = 0 if CAUSAL else WINDOW_RIGHT  # -1: unbounded
        crosses_right = right >= 0 and start_m + shift + right < start_n + BLOCK_N - 1
        crosses_left = WINDOW_LEFT >= 0 and start_m + BLOCK_M - 1 + shift - WINDOW_LEFT > start_n
        if crosses_right or crosses_left or start_m + BLOCK_M > seq_q or start_n + BLOCK_N > seq_k:
            # key indices built here, not held across the loop; KEY_BLOCK_FIXED without swap AB (each thread holds
            # many keys, start_n the same every step): indices from the step's first query, so none is loop-invariant
            base = start_m if KEY_BLOCK_FIXED and not KEYS_ON_ROWS else 0
            keys = gl.expand_dims((start_n - base) + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(QUERY_DIM,
                                                                                                  s.type.layout)),
                                  QUERY_DIM)
            queries = gl.expand_dims(o_m - base, KEY_DIM)
            if KEY_BLOCK_FIXED and CAUSAL:  # keys <= queries + shift < seq_q + shift = seq_k: no key past Nk is left
                visible = (queries < seq_q - base) & (keys <= queries + shift)
            else:
                visible = (keys < seq_k - base) & (queries < seq_q - base)
                if right >= 0:
                    visible = visible & (keys <= queries + shift + right)
            if WINDOW_LEFT >= 0:
                visible = visible & (keys >= queries + shift - WINDOW_LEFT)
            p = gl.where(visible, p, 0.)
    return p, t


# fresh_arange's thread bits of an index in a wgmma accumulator's layout (one warpgroup's 64 rows): a column's bits
# 0-2 (2 (lane % 4) and the register's low bit: 2 values a thread; bits 1-2 alone, one value, spilled 12 B at D128
# under Triton 3.9), a row's bits 0-2 and 4-5 (lane // 4, 16 warp: one value); the others come from the register
ACC_COLUMN_THREAD_BITS = gl.constexpr(0b111)
ACC_ROW_THREAD_BITS = gl.constexpr(0b110111)


@gluon.jit
def fresh_arange(END: gl.constexpr, layout: gl.constexpr, THREAD_BITS: gl.constexpr, FRESH: gl.constexpr = True):
    """gl.arange(0, END, layout), built where it runs (a persistent program's tile loop: not hoisted out of it and
    held, spilled, across it, one register per element): the index's THREAD_BITS through an inline PTX move with
    side effects, plus its other bits. The same values in any layout; where THREAD_BITS are the bits the layout
    takes from the lane and warp (a thread's one value) and the others from the register (a constant of each), one
    register is live across the loop and each index is one add in it. FRESH=False: the plain gl.arange."""
    i = gl.arange(0, END, layout=layout)
    if FRESH:
        own = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [i & THREAD_BITS], dtype=gl.int32, is_pure=False,
                                        pack=1)
        i = (i & (END - 1 - THREAD_BITS)) + own
    return i


@gluon.jit
def unmasked_key_blocks(start_m, seq_q, seq_k, key_blocks, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """How many of a query block's first key blocks (of key_blocks walked from key 0) no row from start_m on needs
    masked for its keys: inside Nk and, causal, left of start_m's bottom-right diagonal (key j BN + BN - 1 <=
    start_m + Nk - Nq). The split_masked loops of the Gluon forward and of ws_two_pass's dQ kernel run these through
    a step compiled without the mask (a caller whose mask also covers queries past Nq checks that itself)."""
    n = gl.minimum(seq_k // BLOCK_N, key_blocks)
    if CAUSAL:
        n = gl.minimum(n, gl.maximum(start_m + seq_k - seq_q + 1, 0) // BLOCK_N)
    return n


@gluon.jit
def gluon_tanh(x):
    """kernels.common.tanh for Gluon: from exp2, accurate near 0, saturating at +-1 (the forward's own formula, so
    P here is the forward's): the same approximate division (div.full.f32) as kernels.common.tanh."""
    e = gl.exp2(gl.abs(x) * (-2.0 * LOG2E_C))
    t = gl.fdiv(1.0 - e, 1.0 + e)
    return gl.where(x < 0, -t, t)


def head_dim_chunks(head_dim: int, split: bool = False) -> tuple[int, int]:
    """(D_MAIN, D_REST): the head-dim chunks the kernels' D-wide products run in. A power of two: (D, 0), one chunk.
    Else the largest power of two below D and the rest when that is a power of two of at least MIN_CHUNK
    (192 = 128 + 64), or with split (the block field head_dim_split) of at least NARROW_CHUNK (96 = 64 + 32): two
    chunks, so no MMA reads the tiles' zero columns past D; else (tile_dim(D), 0), one chunk, zero columns and all
    (96 without split; the block defaults set head_dim_split at D96: 1.02-1.06x ws, 1.10-1.13x ws_two_pass on an
    H100, B2 H16 N4096 bf16, results/h100/gluon/ab_issue43/split96; 192 in chunks: 1.06-1.07x ws_two_pass's
    256-column tiles; results/h100/gluon/h100_gluon_large_d_bf16*)."""
    main = tile_dim(head_dim)
    if main == head_dim:
        return head_dim, 0
    main //= 2
    rest = head_dim - main
    narrowest = NARROW_CHUNK if split else MIN_CHUNK
    return (main, rest) if rest >= narrowest and rest & (rest - 1) == 0 else (tile_dim(head_dim), 0)


def head_dim_split_reason(head_dim: int) -> str | None:
    """Why head_dim_split=true cannot apply at head_dim (one line), or None where it changes the chunks (D96)."""
    if head_dim_chunks(head_dim, split=True) != head_dim_chunks(head_dim):
        return None
    chunks = " + ".join(str(c) for c in head_dim_chunks(head_dim) if c)
    return (f"head_dim_split=true: changes nothing at head dim {head_dim} (its products run in {chunks} columns "
            f"either way); it splits a head dim whose rest is {NARROW_CHUNK} columns (96 = 64 + 32)")


def chunk_tiles_reason(head_dim: int, head_dim_v: int | None = None) -> str | None:
    """Why chunk_tiles=true cannot apply (one line), or None where a head dim (D or Dv) has two chunks of at least
    MIN_CHUNK columns (192 = 128 + 64), whose tiles then share the main tile's 128-byte swizzle."""
    if any(head_dim_chunks(d)[1] for d in (head_dim, head_dim_v or head_dim)):
        return None
    return (f"chunk_tiles=true: changes nothing at head dim {head_dim} / {head_dim_v or head_dim} (no head dim "
            f"with two chunks of >= {MIN_CHUNK} columns, as 192 = 128 + 64)")


def dense_bnhd(t: torch.Tensor) -> bool:
    """Whether t [B, N, H, D] is dense in that order (what the TMA views need)."""
    return t.is_contiguous()


@functools.cache
def tile_dim(head_dim: int) -> int:
    """The tiles' head dim: head_dim rounded up to a power of two (Gluon tiles), at least 16 (a wgmma K step).
    The TMA views read the columns past head_dim as zeros and drop them on stores."""
    return max(16, next_power_of_2(head_dim))


@functools.cache
def shared_layout(block: tuple, dtype) -> object:
    """The NVMMA shared layout of a TMA box (made once per box and dtype: host time of a launch)."""
    return gl.NVMMASharedLayout.get_default_for(list(block), gl.float32 if dtype == torch.float32 else GL_DTYPES[dtype])


_DESCRIPTORS: dict = {}  # key -> a validated descriptor without its base (cached_descriptor)
DESCRIPTOR_TEMPLATES = 1024  # at most this many kept


def cached_descriptor(key: tuple, base: torch.Tensor, make):
    """A host TMA descriptor whose base is `base`, made by make() the first time for `key` (what decides everything
    but the base: shape, strides, dtype, box). Issue 44, host time per call: the descriptor's checks (ranks, box,
    strides, layout) depend on the key only, so later descriptors of a key copy the first one's fields and take
    `base` (the launcher reads only its data pointer). A base that is not 16-byte aligned always goes through
    make(), whose constructor refuses it."""
    template = _DESCRIPTORS.get(key)
    if template is None or base.data_ptr() % 16:
        desc = make()
        if len(_DESCRIPTORS) < DESCRIPTOR_TEMPLATES:
            template = object.__new__(TensorDescriptor)
            template.__dict__.update(desc.__dict__, base=None)  # no reference to the tensor kept
            _DESCRIPTORS[key] = template
        return desc
    desc = object.__new__(TensorDescriptor)
    desc.__dict__.update(template.__dict__, base=base)
    return desc


def template(desc):
    """A descriptor's fields without its base (what `rebase` copies): kept by a launcher's phase memo
    (kernels.launch.memo), never a reference to the call's tensor. None stays None (an absent chunk tile)."""
    if desc is None:
        return None
    fields = dict(desc.__dict__)
    fields["base"] = None
    return fields


def rebase(fields: dict, base: torch.Tensor):
    """The descriptor of `template`'s fields over base: what cached_descriptor gives for a key it has seen, without
    the key (a phase memo's descriptors: the phase's key fixes shape, strides, dtype, box and alignment)."""
    desc = object.__new__(TensorDescriptor)
    desc.__dict__.update(fields, base=base)
    return desc


def tma_descriptor(t2d: torch.Tensor, block: list[int]):
    return cached_descriptor((t2d.shape, t2d.stride(), t2d.dtype, tuple(block)), t2d, lambda: TensorDescriptor(
        t2d, list(t2d.shape), list(t2d.stride()), block, shared_layout(tuple(block), t2d.dtype)))


def rows_descriptor(t: torch.Tensor, block_rows: int, cols: int = 0):
    """The TMA view [B * N, H, D] of t [B, N, H, D] (dense) with boxes [block_rows, 1, cols] (0: tile_dim(D)): one
    head's rows, zeros past D (chunk tiles: a box per head-dim chunk, cols D_MAIN or D_REST)."""
    box_cols = cols or tile_dim(t.shape[-1])

    def make():
        batch, seq, heads, head_dim = t.shape
        return tma_descriptor(t.view(batch * seq, heads, head_dim), [block_rows, 1, box_cols])
    # the base is t itself: the view has its data pointer, and the launcher reads nothing else of the base
    return cached_descriptor(("rows", t.shape, t.stride(), t.dtype, block_rows, box_cols), t, make)
