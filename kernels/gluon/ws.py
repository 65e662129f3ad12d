"""ws: the FA3-structure backward on Hopper, in Gluon. One program per (key block, batch, kv head): K and V stay
in shared memory, dK and dV accumulate in registers, and the program walks every query block that sees its keys
(the query heads of its GQA group in turn). Per query block, all matmuls by async wgmma:

    S^T  = K Q^T        [BN, D] @ [D, BM] -> [BN, BM]    (swap AB: P^T, dS^T come out as the A operand below)
    dP^T = V dO^T       [BN, D] @ [D, BM] -> [BN, BM]
    P^T  = exp2(S^T * scale * log2 e - lse),  dS^T = P^T * (dP^T - delta)
    dV  += P^T dO       [BN, BM] (registers) @ [BM, D] -> [BN, D]
    dK  += dS^T Q       [BN, BM] (registers) @ [BM, D] -> [BN, D]
    dQ_i = dS K         [BM, BN] (shared, dS^T read transposed) @ [BN, D] -> [BM, D]

dQ_i goes to shared memory and is added into an fp32 accumulator [B * H * Nq, D] by one TMA reduce-add;
`dq_finish` scales it into dq. Q and dO arrive through a STAGES-deep TMA ring (mbarriers `ready` / `empty`), the
next blocks' loads in flight while this one computes. With WARP_SPECIALIZE (the default) a 1-warp partition issues
the loads (and stages LSE / delta in shared memory), a 1-warp partition the dQ reduce-adds, and the compute warps
(240 registers) only compute; without it, the compute warps issue both themselves (one partition). A key block's
dK and dV leave through K's and V's shared tiles by TMA stores. docs/ws.md
has the partitions, barriers and measured effects.

Tensors are read as 3-D TMA views [B * N, H, D] of dense [B, N, H, D] storage (`rows_descriptor`), boxes of
tile_dim(D) columns: zeros past D on loads, dropped on stores; a D that is no power of two runs its D-wide products
in `head_dim_chunks`. A block that runs past its sequence reads the next batch's (document's) first rows (or TMA
zeros after the last): those rows are masked out of S^T, so they add exactly 0 to dK, dV and dQ (and dQ's
reduce-add of those zero rows into the next head's accumulator rows changes nothing).
"""
import functools
from typing import NamedTuple

import torch
import triton

from kernels.common import LOG2E, cdiv
from kernels.gluon.compat import (TensorDescriptor, cta_barrier, fence_async_shared, gl, gluon, mbarrier, tma_load,
                                  tma_reduce_add, tma_store, tma, warpgroup_mma_wait)
from kernels.gluon.tiles import (GL_DTYPES, WsDocs, as_box, cached_descriptor, chunk_zeros, dense_bnhd, document_pair,
                                  head_dim_chunks, issue_products, mma_chunks, probabilities, rows_descriptor,
                                  shared_layout, store_chunks, store_rows, tile_dim, wait_chunks)
from kernels.launch import launch

HEAD_DIMS = (64, 96, 128, 192, 256)  # with measured or compile-checked tiles (variants.ws)


class WsTensors(NamedTuple):  # what the kernel reads and writes by pointer
    lse: object  # [B, H, Nq] fp32, base 2 (packed: [1, H, total_q])
    delta: object  # like lse
    dk: object  # [B, Nk, Hkv, D] dense (tails' masked stores)
    dv: object  # like dk


class WsSchedule(NamedTuple):  # PERSISTENT: the programs' tiles (`tile_schedule`), int32
    tiles: object  # [tiles], numbered as `_tile` numbers them
    tile_starts: object  # [programs + 1]: program p walks tiles[tile_starts[p]:tile_starts[p + 1]]


class WsSizes(NamedTuple):  # the problem's sizes (VARLEN: seq_q, seq_k the packed totals) and the softmax scale
    seq_q: int
    seq_k: int
    heads: int
    kv_heads: int
    batch_kv_heads: int  # B * Hkv
    chunk_heads: int  # (batch, kv head) pairs per chunk of tiles (`chunk_heads`)
    qk_scale: float  # scale * log2(e): S to exp2's units
    sm_scale: float  # scale: dK's


class WsLayouts(NamedTuple):  # the kernel's register and shared layouts (`layouts`)
    s: object  # S^T / dP^T [BN, BM] (swap AB), else S / dP [BM, BN]
    kv: object  # dK / dV [BN, D_MAIN]
    dq: object  # dQ [BM, D_MAIN]
    kv_r: object  # dK / dV [BN, D_REST] (the second head-dim chunk; kv with one chunk)
    dq_r: object  # dQ [BM, D_REST] (dq with one chunk)
    ds_smem: object  # dS^T, P^T [BN, BM] (swap AB), else dS, P [BM, BN]
    stats_smem: object  # LSE, delta [BM] of a ring stage
    q_smem: object  # Q, dO [BM, tile D]
    kv_smem: object  # K, V (dK, dV) [BN, tile D]


@gluon.jit
def _ws_backward_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, tensors, schedule, docs, sizes,
                        DIM: gl.constexpr, LAYOUTS: gl.constexpr,
                        D_MAIN: gl.constexpr, D_REST: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                        WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr,
                        MASKED: gl.constexpr, WARP_SPECIALIZE: gl.constexpr, SWAP_AB: gl.constexpr,
                        PERSISTENT: gl.constexpr, VARLEN: gl.constexpr, WITH_DQ: gl.constexpr = True):
    """Grid (cdiv(Nk, BLOCK_N) * B * Hkv,), one tile (key block of a (batch, kv head)) per program, batch_kv_heads
    = B * Hkv; PERSISTENT: grid (programs,), program p walks tiles TILES[TILE_STARTS[p]:TILE_STARTS[p + 1]]
    (schedule, a WsSchedule: int32, made on the host by `tile_schedule`); VARLEN: grid (pairs * Hkv,), PAIRS
    [pairs, 2] = (document, key block), CU_Q / CU_K the cu_seqlens (docs, a WsDocs). The TMA views, each its own
    argument (Triton 3.6's launcher takes host descriptors only at the top level, not inside a tuple): q/do
    [B * Nq, H, D] boxes [BM, 1, tile D]; k/v/dk/dv [B * Nk, Hkv, D] boxes [BN, 1, tile D]; dq the fp32 accumulator
    [B * H * dq_rows(Nq), tile D] (packed: [H * total_q, tile D]) boxes [BM, tile D], rows reordered within groups of
    8 (`_bank_spread_rows`, not VARLEN). tensors (WsTensors): LSE (base 2), DELTA [B, H, Nq] fp32; DK, DV dense
    [B, Nk, Hkv, DIM]. sizes (WsSizes): seq_q, seq_k, heads, kv_heads, batch_kv_heads, chunk_heads, qk_scale,
    sm_scale. DIM: the data's head dim; D_MAIN, D_REST: its chunks (`head_dim_chunks`);
    LAYOUTS: a WsLayouts (`layouts`), *_r the second chunk's. MASKED: causal, or a sequence not a multiple of its
    block.
    WARP_SPECIALIZE: the num_warps warps only compute; one more warp issues the TMA loads (`_load_partition`)
    and one the dQ reduce-adds (`_dq_partition`), handing tiles over through mbarriers; else the compute warps
    issue both themselves.
    WITH_DQ=False (ws_two_pass's dK/dV kernel; WARP_SPECIALIZE): no dQ, no dQ warp; the compute warps
    hand each step's stage back themselves. Every partition walks the same tiles and steps; the Q / dO ring and the dQ hand-over count steps across tiles,
    and K / V of the next tile load once the compute warps are done with this one's (`kv_empty`), while they
    store its dK, dV."""
    LSE, DELTA, DK, DV = tensors
    TILES, TILE_STARTS = schedule
    CU_Q, CU_K, PAIRS = docs
    seq_q, seq_k, heads, kv_heads, batch_kv_heads, chunk_heads, qk_scale, sm_scale = sizes
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[2]  # the tiles' head dim: DIM rounded up to a power of two
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    pid = gl.program_id(0)
    if PERSISTENT:
        first_tile = gl.load(TILE_STARTS + pid)
        end_tile = gl.load(TILE_STARTS + pid + 1)
    else:
        first_tile = pid
        end_tile = pid + 1
    sizes = (seq_q, seq_k, heads, kv_heads, batch_kv_heads, chunk_heads, CU_Q, CU_K, PAIRS)  # what `_tile` reads
    schedule = (TILES, first_tile, end_tile)  # this program's tiles

    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], LAYOUTS.q_smem)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], LAYOUTS.q_smem)
    if SWAP_AB:  # dS^T [BN, BM] (P^T stays in registers)
        ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_M], LAYOUTS.ds_smem)
        p_smem = ds_smem
    else:  # dS and P [BM, BN]: A operands of dK, dV (read transposed) and dQ
        ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], LAYOUTS.ds_smem)
        p_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], LAYOUTS.ds_smem)
    if WITH_DQ:
        dq_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_DIM], dq_desc.layout)  # a step's dQ
    else:  # no dQ: a placeholder
        dq_smem = gl.allocate_shared_memory(gl.float32, [8, HEAD_DIM], dq_desc.layout)
    # LSE and delta of each stage's query block, staged by the load warp (WARP_SPECIALIZE)
    lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], LAYOUTS.stats_smem)
    delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], LAYOUTS.stats_smem)
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())  # a tile's MMAs are done
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # Q, dO of a stage landed
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # a stage's MMAs are done
    dq_full = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())  # a step's dQ to add
    dq_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())  # its reduce-add read it
    mbarrier.init(kv_ready, count=1)
    mbarrier.init(kv_empty, count=1)
    mbarrier.init(dq_full, count=1)
    mbarrier.init(dq_empty, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)

    tiles = (k_smem, v_smem, q_smem, do_smem, ds_smem, p_smem, dq_smem, lse_smem, delta_smem, kv_ready, kv_empty,
             ready, empty, dq_full, dq_empty)
    stores = (dk_desc, dv_desc, DK, DV, sm_scale, DIM)
    loads = (q_desc, k_desc, v_desc, do_desc)
    stats = (LSE, DELTA)
    if not WITH_DQ:  # the compute warps and the load warp only
        gl.warp_specialize([
            (_mma_partition, (tiles, schedule, sizes, stores, stats, qk_scale, LAYOUTS, D_MAIN, D_REST, STAGES, CAUSAL,
                              WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, MASKED, True, SWAP_AB, PERSISTENT, VARLEN, None,
                              False)),
            (_load_partition, (loads, tiles, schedule, sizes, stats, STAGES, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT,
                               SOFTCAP, PERSISTENT, VARLEN)),
        ], [1], [24])
    elif WARP_SPECIALIZE:
        gl.warp_specialize([
            (_mma_partition, (tiles, schedule, sizes, stores, stats, qk_scale, LAYOUTS, D_MAIN, D_REST, STAGES, CAUSAL,
                              WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, MASKED, True, SWAP_AB, PERSISTENT, VARLEN)),
            (_load_partition, (loads, tiles, schedule, sizes, stats, STAGES, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT,
                               SOFTCAP, PERSISTENT, VARLEN)),
            (_dq_partition, (dq_desc, tiles, schedule, sizes, STAGES, BLOCK_N, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT,
                             SOFTCAP, PERSISTENT, VARLEN)),
        ], [1, 1], [24, 24])
    else:
        _mma_partition(tiles, schedule, sizes, stores, stats, qk_scale, LAYOUTS, D_MAIN, D_REST, STAGES, CAUSAL,
                       WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, MASKED, False, SWAP_AB, PERSISTENT, VARLEN,
                       (q_desc, k_desc, v_desc, do_desc, dq_desc))


@gluon.jit
def _tile(k, schedule, sizes, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr,
          PERSISTENT: gl.constexpr, VARLEN: gl.constexpr):
    """The rows of the schedule's k-th tile: (i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo,
    m_blocks, steps, bases); bases = (q_row0, k_row0, stats_row0, stats_stride, acc_row0, acc_stride): the first
    row of its batch (document) in the [rows, heads, D] views of q / k, where the LSE / delta and dQ accumulator
    rows of its query head i_h start (row0 + i_h * stride). Tiles are numbered in chunks of `chunk_heads` (batch, kv head) pairs, key blocks in order
    within a chunk, the heads of the chunk interleaved: the tiles running at once share their heads' Q, dO and dQ
    rows in L2, and under causal masking (key block 0 walks the most query blocks) each chunk starts its longest
    tiles first. The steps walk the query blocks that see the key block (from the first one reaching the causal
    diagonal, or a window's right edge, to the end, or to the last one inside a window's left edge) for each query
    head of the kv head's group in turn. VARLEN (packed documents, q [1, total_q, H, D]): tile = pair * kv_heads +
    kv head, PAIRS[pair] = (document, key block) (kernels.varlen.Packing.block_indices), the document's rows from
    CU_Q / CU_K; seq_q / seq_k are the packed totals on entry, the document's lengths on return."""
    TILES, first_tile, end_tile = schedule
    seq_q, seq_k, heads, kv_heads, batch_kv_heads, chunk_heads, CU_Q, CU_K, PAIRS = sizes
    if PERSISTENT:
        tile = gl.load(TILES + k)
    else:
        tile = k
    if VARLEN:
        i_hk = tile % kv_heads
        i_b, i_n, q_row0, k_row0, doc_q, doc_k = document_pair(tile // kv_heads, PAIRS, CU_Q, CU_K)
        bases = (q_row0, k_row0, q_row0, seq_q, q_row0, seq_q)  # LSE [1, H, total_q]; accumulator [H, total_q, D]
        seq_q = doc_q
        seq_k = doc_k
    else:
        key_blocks = gl.cdiv(seq_k, BLOCK_N)
        chunk = tile // (chunk_heads * key_blocks)
        in_chunk = tile % (chunk_heads * key_blocks)
        heads_here = gl.minimum(chunk_heads, batch_kv_heads - chunk * chunk_heads)  # the last chunk may be short
        i_n = in_chunk // heads_here
        i_bhk = chunk * chunk_heads + in_chunk % heads_here
        i_b = i_bhk // kv_heads
        i_hk = i_bhk % kv_heads
        acc_rows = gl.cdiv(seq_q, 8) * 8  # dq_rows: [B * H * acc_rows, D]
        bases = (i_b * seq_q, i_b * seq_k, i_b * heads * seq_q, seq_q, i_b * heads * acc_rows, acc_rows)
    group = heads // kv_heads
    start_n = i_n * BLOCK_N
    shift = seq_k - seq_q  # bottom-right causal: query i sees key j iff j <= i + shift
    if CAUSAL:
        m_lo = gl.maximum(start_n - shift, 0) // BLOCK_M * BLOCK_M
    elif WINDOW_RIGHT >= 0:  # query i sees key j iff j <= i + shift + WINDOW_RIGHT
        m_lo = gl.maximum(start_n - shift - WINDOW_RIGHT, 0) // BLOCK_M * BLOCK_M
    else:
        m_lo = 0
    if WINDOW_LEFT >= 0:  # query i sees key j iff j >= i + shift - WINDOW_LEFT: the last one sees the block's last key
        m_end = gl.minimum(gl.maximum(start_n + BLOCK_N - shift + WINDOW_LEFT, 0), seq_q)
    else:
        m_end = seq_q
    m_blocks = gl.cdiv(gl.maximum(m_end - m_lo, 0), BLOCK_M)
    return (i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo, m_blocks, m_blocks * group, bases)


@gluon.jit
def _query_block(step, rows, BLOCK_M: gl.constexpr):
    """(query head, first query) of a step."""
    i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo, m_blocks, steps, bases = rows
    return i_hk * group + step // m_blocks, m_lo + (step % m_blocks) * BLOCK_M


@gluon.jit
def _dq_row(rows, i_h, start_m):
    """The fp32 accumulator's row of query start_m of head i_h: [B * H * dq_rows(Nq), D] (packed: [H * total_q, D])."""
    q_row0, k_row0, stats_row0, stats_stride, acc_row0, acc_stride = rows[11]
    return acc_row0 + i_h * acc_stride + start_m


@gluon.jit
def _stats_rows(rows, i_h, o_m):
    """LSE / delta offsets of queries o_m of head i_h: [B, H, Nq] (packed: [1, H, total_q])."""
    q_row0, k_row0, stats_row0, stats_stride, acc_row0, acc_stride = rows[11]
    return stats_row0 + i_h * stats_stride + o_m


@gluon.jit
def _issue_kv(k_desc, v_desc, tiles, rows):
    k_smem, v_smem, q_smem, do_smem, ds_smem, p_smem, dq_smem, lse_smem, delta_smem, kv_ready, kv_empty, ready, empty, dq_full, dq_empty = tiles
    i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo, m_blocks, steps, bases = rows
    q_row0, k_row0, stats_row0, stats_stride, acc_row0, acc_stride = bases
    mbarrier.expect(kv_ready, 2 * k_desc.block_type.nbytes)
    tma_load(k_desc, [k_row0 + start_n, i_hk, 0], kv_ready, as_box(k_smem))
    tma_load(v_desc, [k_row0 + start_n, i_hk, 0], kv_ready, as_box(v_smem))


@gluon.jit
def _issue_qdo(q_desc, do_desc, tiles, rows, step, slot, STAGES: gl.constexpr):
    """The tile's step-th Q and dO tiles ([B * Nq, H, D] views) into the ring stage of slot (steps counted across
    the program's tiles), signalling `ready`."""
    k_smem, v_smem, q_smem, do_smem, ds_smem, p_smem, dq_smem, lse_smem, delta_smem, kv_ready, kv_empty, ready, empty, dq_full, dq_empty = tiles
    i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo, m_blocks, steps, bases = rows
    q_row0, k_row0, stats_row0, stats_stride, acc_row0, acc_stride = bases
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    i_h, start_m = _query_block(step, rows, BLOCK_M)
    stage = slot % STAGES
    mbarrier.expect(ready.index(stage), 2 * q_desc.block_type.nbytes)
    tma_load(q_desc, [q_row0 + start_m, i_h, 0], ready.index(stage), as_box(q_smem.index(stage)))
    tma_load(do_desc, [q_row0 + start_m, i_h, 0], ready.index(stage), as_box(do_smem.index(stage)))


@gluon.jit
def _load_partition(loads, tiles, schedule, sizes, stats, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                    WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr,
                    PERSISTENT: gl.constexpr, VARLEN: gl.constexpr):
    """One warp: per tile, K and V once the compute warps are done with the last tile's, then every step's Q, dO as
    soon as the dQ warp has released its stage. loads: (q_desc, k_desc, v_desc, do_desc); stats: (LSE, DELTA)."""
    TILES, first_tile, end_tile = schedule
    if PERSISTENT:
        slot = 0  # steps before this tile's, over the program's tiles: the ring's position
        for k in range(first_tile, end_tile):
            slot = _load_tile(k, slot, k - first_tile, loads, tiles, schedule, sizes, stats, STAGES, CAUSAL,
                              WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, PERSISTENT, VARLEN)
    else:
        _load_tile(first_tile, 0, 0, loads, tiles, schedule, sizes, stats, STAGES, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT,
                   SOFTCAP, PERSISTENT, VARLEN)


@gluon.jit
def _load_tile(k, slot, tile_count, loads, tiles, schedule, sizes, stats, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
               WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr, PERSISTENT: gl.constexpr,
               VARLEN: gl.constexpr):
    """The k-th tile's loads, its steps at ring positions slot, slot + 1, ...; tile_count: the program's tiles
    before it -> the ring position after it."""
    q_desc, k_desc, v_desc, do_desc = loads
    LSE, DELTA = stats
    k_smem, v_smem, q_smem, do_smem, ds_smem, p_smem, dq_smem, lse_smem, delta_smem, kv_ready, kv_empty, ready, empty, dq_full, dq_empty = tiles
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    row_layout: gl.constexpr = gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0])
    rows = _tile(k, schedule, sizes, BLOCK_M, BLOCK_N, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, PERSISTENT, VARLEN)
    i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo, m_blocks, steps, bases = rows
    mbarrier.wait(kv_empty, (tile_count & 1) ^ 1)  # passes at once for the first tile
    _issue_kv(k_desc, v_desc, tiles, rows)
    for step in range(steps):
        # LSE and delta through shared memory: a global load in flight in the compute warps would hold back
        # their next wgmma (its fence waits for every pending register write)
        i_h, start_m = _query_block(step, rows, BLOCK_M)
        o_m = start_m + gl.arange(0, BLOCK_M, layout=row_layout)
        row_stats = _stats_rows(rows, i_h, o_m)
        lse = gl.load(LSE + row_stats, mask=o_m < seq_q, other=float("inf"))  # [BM]; rows past Nq: P = 0
        delta = gl.load(DELTA + row_stats, mask=o_m < seq_q, other=0.)  # [BM]
        stage = (slot + step) % STAGES
        mbarrier.wait(empty.index(stage), (((slot + step) // STAGES) & 1) ^ 1)  # passes at once on the first lap
        lse_smem.index(stage).store(lse)
        delta_smem.index(stage).store(delta)
        _issue_qdo(q_desc, do_desc, tiles, rows, step, slot + step, STAGES)  # its `ready` releases the stores
    return slot + steps


@gluon.jit
def _dq_partition(dq_desc, tiles, schedule, sizes, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
                  CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr, PERSISTENT: gl.constexpr, VARLEN: gl.constexpr):
    """One warp: adds each step's dQ tile from dq_smem into the fp32 accumulator ([B * H * Nq, D]) by TMA, and
    hands the step's Q / dO stage back to the load warp (dq_full means all of the step's MMAs are done)."""
    TILES, first_tile, end_tile = schedule
    if PERSISTENT:
        slot = 0
        for k in range(first_tile, end_tile):
            slot = _dq_tile(k, slot, dq_desc, tiles, schedule, sizes, STAGES, BLOCK_N, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, PERSISTENT, VARLEN)
    else:
        _dq_tile(first_tile, 0, dq_desc, tiles, schedule, sizes, STAGES, BLOCK_N, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, PERSISTENT, VARLEN)


@gluon.jit
def _dq_tile(k, slot, dq_desc, tiles, schedule, sizes, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
             CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr, PERSISTENT: gl.constexpr, VARLEN: gl.constexpr):
    k_smem, v_smem, q_smem, do_smem, ds_smem, p_smem, dq_smem, lse_smem, delta_smem, kv_ready, kv_empty, ready, empty, dq_full, dq_empty = tiles
    BLOCK_M: gl.constexpr = dq_desc.block_type.shape[0]
    rows = _tile(k, schedule, sizes, BLOCK_M, BLOCK_N, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, PERSISTENT, VARLEN)
    i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo, m_blocks, steps, bases = rows
    for step in range(steps):
        i_h, start_m = _query_block(step, rows, BLOCK_M)
        mbarrier.wait(dq_full, (slot + step) & 1)
        tma_reduce_add(dq_desc, [_dq_row(rows, i_h, start_m), 0], dq_smem)
        mbarrier.arrive(empty.index((slot + step) % STAGES), count=1)  # the step's MMAs are done: stage free
        tma.store_wait(pendings=0)
        mbarrier.arrive(dq_empty, count=1)
    return slot + steps


@gluon.jit
def _issue_scores(k_smem, v_smem, q_tile, do_tile, S_LAYOUT: gl.constexpr, SWAP_AB: gl.constexpr,
                  D_MAIN: gl.constexpr, D_REST: gl.constexpr):
    """S^T = K Q^T and dP^T = V dO^T [BN, BM] (swap AB), else S = Q K^T and dP = dO V^T [BM, BN]: async wgmma
    groups in flight, one per head-dim chunk of each (`issue_products`)."""
    if SWAP_AB:
        s, dp = issue_products(k_smem, q_tile, v_smem, do_tile, S_LAYOUT, D_MAIN, D_REST)
    else:
        s, dp = issue_products(q_tile, k_smem, do_tile, v_smem, S_LAYOUT, D_MAIN, D_REST)
    return s, dp


@gluon.jit
def _wait_chunks1(n: gl.constexpr, x, D_REST: gl.constexpr):
    """warpgroup_mma_wait(num_outstanding=n) on one chunk tuple -> x."""
    if D_REST > 0:
        x0, x1 = warpgroup_mma_wait(num_outstanding=n, deps=(x[0], x[1]))
        return (x0, x1)
    else:
        x0 = warpgroup_mma_wait(num_outstanding=n, deps=(x[0],))
        return (x0,)


@gluon.jit
def _softcap_grad(ds, t, SOFTCAP: gl.constexpr):
    """dS with respect to the capped score -> with respect to the scaled score (d tanh = 1 - tanh^2)."""
    if SOFTCAP > 0:
        ds = ds * (1.0 - t * t)
    return ds


@gluon.jit
def _gradients(s_t, dp_t, lse, delta, dk, dv, q_tile, do_tile, k_smem, ds_smem, o_m, start_n, start_m,
               seq_q, seq_k, qk_scale, LAYOUTS: gl.constexpr, D_MAIN: gl.constexpr, D_REST: gl.constexpr,
               CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr,
               MASKED: gl.constexpr, WITH_DQ: gl.constexpr = True):
    """One step from its S^T, dP^T in flight (the last wgmma groups): P^T and dS^T, then dV += P^T dO,
    dK += dS^T Q and dQ = dS K issued -> (dq [BM, D], dk, dv [BN, D]) as head-dim chunk tuples, in flight."""
    BLOCK_M: gl.constexpr = q_tile.shape[0]
    dtype: gl.constexpr = k_smem.dtype
    CHUNKS: gl.constexpr = 2 if D_REST > 0 else 1  # wgmma groups per product
    P_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=LAYOUTS.kv, k_width=2)
    P_OPERAND_R: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=LAYOUTS.kv_r, k_width=2)
    DQ_LAYOUT: gl.constexpr = LAYOUTS.dq  # passed on to a jit function: bound as a constexpr (Triton 3.6)
    DQ_LAYOUT_R: gl.constexpr = LAYOUTS.dq_r
    s_t = warpgroup_mma_wait(num_outstanding=CHUNKS, deps=(s_t,))
    p_t, t_t = probabilities(s_t, lse, o_m, start_n, start_m, seq_q, seq_k, qk_scale, True, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, MASKED)  # [BN, BM]
    p_lo = p_t.to(dtype)
    dv = mma_chunks(gl.convert_layout(p_lo, P_OPERAND), gl.convert_layout(p_lo, P_OPERAND_R), do_tile, dv, D_MAIN,
                     D_REST)  # [BN, BM] @ [BM, D]
    dp_t = warpgroup_mma_wait(num_outstanding=CHUNKS, deps=(dp_t,))
    ds_t = _softcap_grad(p_t * (dp_t - gl.expand_dims(delta, 0)), t_t, SOFTCAP).to(dtype)  # [BN, BM]
    if WITH_DQ:  # dQ's group before dK's: the step waits for dQ alone and stores it while dK's wgmmas run
        ds_smem.store(ds_t)
        fence_async_shared()
        cta_barrier()  # every warpgroup's rows of dS^T are in shared memory before dQ reads all of them
        dq = mma_chunks(ds_smem.permute((1, 0)), ds_smem.permute((1, 0)), k_smem,
                         chunk_zeros(BLOCK_M, DQ_LAYOUT, DQ_LAYOUT_R, D_MAIN, D_REST), D_MAIN, D_REST,
                         use_acc=False)  # [BM, BN] @ [BN, D] -> [BM, D]
    dk = mma_chunks(gl.convert_layout(ds_t, P_OPERAND), gl.convert_layout(ds_t, P_OPERAND_R), q_tile, dk, D_MAIN,
                     D_REST)  # [BN, BM] @ [BM, D]
    if not WITH_DQ:
        dq = dk  # no dQ (ws_two_pass): a placeholder
    return dq, dk, dv


@gluon.jit
def _gradients_mn(s, dp, lse, delta, dk, dv, q_tile, do_tile, k_smem, p_smem, ds_smem, o_m, start_n, start_m,
                  seq_q, seq_k, qk_scale, LAYOUTS: gl.constexpr, D_MAIN: gl.constexpr, D_REST: gl.constexpr,
                  CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr,
                  MASKED: gl.constexpr, WITH_DQ: gl.constexpr = True):
    """Without swap AB (each warpgroup owns query rows of S, dP): P and dS go to shared memory, where dV += P^T dO
    and dK += dS^T Q read them transposed (each warpgroup its key rows) and dQ = dS K as they are
    -> (dq [BM, D], dk, dv [BN, D]), their three wgmma groups in flight."""
    BLOCK_M: gl.constexpr = q_tile.shape[0]
    dtype: gl.constexpr = k_smem.dtype
    CHUNKS: gl.constexpr = 2 if D_REST > 0 else 1  # wgmma groups per product
    DQ_LAYOUT: gl.constexpr = LAYOUTS.dq  # passed on to a jit function: bound as a constexpr (Triton 3.6)
    DQ_LAYOUT_R: gl.constexpr = LAYOUTS.dq_r
    s = warpgroup_mma_wait(num_outstanding=CHUNKS, deps=(s,))
    p, t = probabilities(s, lse, o_m, start_n, start_m, seq_q, seq_k, qk_scale, False, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, MASKED)  # [BM, BN]
    p_smem.store(p.to(dtype))
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp,))
    ds = _softcap_grad(p * (dp - gl.expand_dims(delta, 1)), t, SOFTCAP).to(dtype)  # [BM, BN]
    ds_smem.store(ds)
    fence_async_shared()
    cta_barrier()  # every warpgroup's rows of P and dS are in shared memory before the wgmmas read all of them
    dv = mma_chunks(p_smem.permute((1, 0)), p_smem.permute((1, 0)), do_tile, dv, D_MAIN, D_REST)  # [BN, BM] @ [BM, D]
    if WITH_DQ:  # dQ's group before dK's, as in `_gradients`
        dq = mma_chunks(ds_smem, ds_smem, k_smem, chunk_zeros(BLOCK_M, DQ_LAYOUT, DQ_LAYOUT_R, D_MAIN, D_REST),
                         D_MAIN, D_REST, use_acc=False)  # [BM, BN] @ [BN, D] -> [BM, D]
    dk = mma_chunks(ds_smem.permute((1, 0)), ds_smem.permute((1, 0)), q_tile, dk, D_MAIN, D_REST)
    if not WITH_DQ:
        dq = dk  # no dQ (ws_two_pass): a placeholder
    return dq, dk, dv


@gluon.jit
def _bank_spread_rows(tile):
    """tile [R, C] (fp32, a wgmma accumulator) with its rows reordered within each group of 8: row 4 a + b -> 2 b + a
    (a < 2, b < 4). A 64-bit store of the accumulator writes 4 consecutive rows per half warp, 32 bytes each;
    under the 128-byte swizzle rows 2 i and 2 i + 1 share their banks (2-way conflicts: Nsight Compute counted
    34 M at D128 N4096, cuDNN 0.5 M). Reordered, the half warp writes rows 0, 2, 4, 6: distinct banks. The fp32
    accumulator holds rows in this order (`dq_finish(..., spread_rows=True)` reads them back)."""
    R: gl.constexpr = tile.shape[0]
    C: gl.constexpr = tile.shape[1]
    return gl.reshape(gl.permute(gl.reshape(tile, [R // 8, 2, 4, C]), [0, 2, 1, 3]), [R, C])


@gluon.jit
def _mma_partition(tiles, schedule, sizes, stores, stats, qk_scale, LAYOUTS: gl.constexpr, D_MAIN: gl.constexpr,
                   D_REST: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, WINDOW_LEFT: gl.constexpr,
                   WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr, MASKED: gl.constexpr, SPECIALIZED: gl.constexpr,
                   SWAP_AB: gl.constexpr, PERSISTENT: gl.constexpr, VARLEN: gl.constexpr, descs=None,
                   WITH_DQ: gl.constexpr = True):
    """The compute warps: per tile, per step, the five matmuls and the softmax gradient; at the end of a tile they
    store its dK (scaled) and dV (stores: DK, DV, sm_scale). stats: (LSE, DELTA). SPECIALIZED: the loads and
    reduce-adds are other warps' (signalled through mbarriers); else issued here (descs: the q, k, v, do, dq TMA
    views, given). WITH_DQ=False (SPECIALIZED): dK and dV only, each step's stage handed back here."""
    TILES, first_tile, end_tile = schedule
    if PERSISTENT:
        slot = 0  # steps before this tile's, over the program's tiles: the ring's and the dQ hand-over's position
        for k in range(first_tile, end_tile):
            slot = _mma_tile(k, slot, k - first_tile, tiles, schedule, sizes, stores, stats, qk_scale, LAYOUTS,
                             D_MAIN, D_REST, STAGES, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, MASKED, SPECIALIZED,
                             SWAP_AB, PERSISTENT, VARLEN, descs, WITH_DQ)
    else:
        _mma_tile(first_tile, 0, 0, tiles, schedule, sizes, stores, stats, qk_scale, LAYOUTS, D_MAIN, D_REST, STAGES,
                  CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, MASKED, SPECIALIZED, SWAP_AB, PERSISTENT, VARLEN,
                  descs, WITH_DQ)


@gluon.jit
def _mma_tile(k, slot, tile_count, tiles, schedule, sizes, stores, stats, qk_scale, LAYOUTS: gl.constexpr,
              D_MAIN: gl.constexpr, D_REST: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              WINDOW_LEFT: gl.constexpr, WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr, MASKED: gl.constexpr,
              SPECIALIZED: gl.constexpr, SWAP_AB: gl.constexpr, PERSISTENT: gl.constexpr, VARLEN: gl.constexpr,
              descs, WITH_DQ: gl.constexpr = True):
    """The k-th tile, its steps at ring positions slot, slot + 1, ... (tile_count: the program's tiles before it)
    -> the ring position after it."""
    k_smem, v_smem, q_smem, do_smem, ds_smem, p_smem, dq_smem, lse_smem, delta_smem, kv_ready, kv_empty, ready, empty, dq_full, dq_empty = tiles
    LSE, DELTA = stats
    BLOCK_N: gl.constexpr = k_smem.shape[0]
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    # S^T [BN, BM] (swap AB: keys on dim 0) or S [BM, BN]: query-indexed vectors are slices along the key dim
    KEY_DIM: gl.constexpr = 0 if SWAP_AB else 1
    CHUNKS: gl.constexpr = 2 if D_REST > 0 else 1  # wgmma groups per product
    S_LAYOUT: gl.constexpr = LAYOUTS.s  # layouts passed on to jit functions: bound as constexprs (Triton 3.6)
    KV_LAYOUT: gl.constexpr = LAYOUTS.kv
    KV_LAYOUT_R: gl.constexpr = LAYOUTS.kv_r
    rows = _tile(k, schedule, sizes, BLOCK_M, BLOCK_N, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, PERSISTENT, VARLEN)
    i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo, m_blocks, steps, bases = rows
    if not SPECIALIZED:  # K, V and the first STAGES - 1 steps' Q, dO (one tile per program: nothing to wait)
        q_desc, k_desc, v_desc, do_desc, dq_desc = descs
        _issue_kv(k_desc, v_desc, tiles, rows)
        for s in gl.static_range(STAGES - 1):
            if s < steps:
                _issue_qdo(q_desc, do_desc, tiles, rows, s, slot + s, STAGES)
    dk = chunk_zeros(BLOCK_N, KV_LAYOUT, KV_LAYOUT_R, D_MAIN, D_REST)  # [BN, D] as head-dim chunks
    dv = chunk_zeros(BLOCK_N, KV_LAYOUT, KV_LAYOUT_R, D_MAIN, D_REST)
    mbarrier.wait(kv_ready, tile_count & 1)
    for step in range(steps):
        if not SPECIALIZED:  # refill the stage that the previous step finished with
            if step + STAGES - 1 < steps:
                _issue_qdo(q_desc, do_desc, tiles, rows, step + STAGES - 1, slot + step + STAGES - 1, STAGES)
        stage = (slot + step) % STAGES
        i_h, start_m = _query_block(step, rows, BLOCK_M)
        o_m = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(KEY_DIM, S_LAYOUT))  # query of each S column
        q_tile = q_smem.index(stage)
        do_tile = do_smem.index(stage)
        mbarrier.wait(ready.index(stage), ((slot + step) // STAGES) & 1)
        s_t, dp_t = _issue_scores(k_smem, v_smem, q_tile, do_tile, S_LAYOUT, SWAP_AB, D_MAIN, D_REST)
        if SPECIALIZED:  # staged by the load warp with this stage's Q, dO
            lse = lse_smem.index(stage).load(gl.SliceLayout(KEY_DIM, S_LAYOUT))  # [BM]
            delta = delta_smem.index(stage).load(gl.SliceLayout(KEY_DIM, S_LAYOUT))  # [BM]
        else:
            row_stats = _stats_rows(rows, i_h, o_m)
            lse = gl.load(LSE + row_stats, mask=o_m < seq_q, other=float("inf"))  # [BM]; rows past Nq: P = 0
            delta = gl.load(DELTA + row_stats, mask=o_m < seq_q, other=0.)  # [BM]
        if SWAP_AB:
            dq, dk, dv = _gradients(s_t, dp_t, lse, delta, dk, dv, q_tile, do_tile, k_smem, ds_smem, o_m,
                                    start_n, start_m, seq_q, seq_k, qk_scale, LAYOUTS, D_MAIN, D_REST, CAUSAL,
                                    WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, MASKED, WITH_DQ)
        else:
            dq, dk, dv = _gradients_mn(s_t, dp_t, lse, delta, dk, dv, q_tile, do_tile, k_smem, p_smem, ds_smem,
                                       o_m, start_n, start_m, seq_q, seq_k, qk_scale, LAYOUTS, D_MAIN, D_REST, CAUSAL,
                                       WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, MASKED, WITH_DQ)
        if not WITH_DQ:  # ws_two_pass's dK/dV kernel: the step's MMAs done, its stage goes back to the load warp
            dk, dv = wait_chunks(0, dk, dv, D_REST)
            mbarrier.arrive(empty.index(stage), count=1)
        else:  # dV's and dQ's groups done; dK's (the last issued) run on while dQ goes to shared memory
            dq, dv = wait_chunks(CHUNKS, dq, dv, D_REST)
        if WITH_DQ:
            if SPECIALIZED:
                mbarrier.wait(dq_empty, ((slot + step) & 1) ^ 1)  # the last reduce-add has read dq_smem
            else:
                tma.store_wait(pendings=0)
            _store_dq(dq_smem, dq, D_MAIN, D_REST, VARLEN)
            dk = _wait_chunks1(0, dk, D_REST)  # dK's wgmmas read this stage's Q: done before the stage is freed
            fence_async_shared()
            if SPECIALIZED:  # the arrive waits for every compute warp (a barrier), then one thread signals
                mbarrier.arrive(dq_full, count=1)  # also frees the stage (the dQ warp passes it on)
            else:
                cta_barrier()
                tma_reduce_add(dq_desc, [_dq_row(rows, i_h, start_m), 0], dq_smem)
    if not SPECIALIZED:
        tma.store_wait(pendings=0)
    dk_desc, dv_desc, DK, DV, sm_scale, DIM = stores
    q_row0, k_row0, stats_row0, stats_stride, acc_row0, acc_stride = bases
    if start_n + BLOCK_N <= seq_k:  # a whole key block: dK, dV through K's and V's shared tiles, by TMA
        cta_barrier()  # every warpgroup's last wgmmas (which read all of K) are done
        store_chunks(k_smem, dk, sm_scale, D_MAIN, D_REST)
        store_chunks(v_smem, dv, 1.0, D_MAIN, D_REST)
        fence_async_shared()
        cta_barrier()
        tma_store(dk_desc, [k_row0 + start_n, i_hk, 0], as_box(k_smem))  # columns past DIM: outside the view, dropped
        tma_store(dv_desc, [k_row0 + start_n, i_hk, 0], as_box(v_smem))
        tma.store_wait(pendings=0)
        # K, V can take the next tile's (the arrive's barrier: in every warp, after the stores have read them)
        mbarrier.arrive(kv_empty, count=1)
    else:  # a tail: its rows past Nk are the next batch's in the view, so masked stores from registers
        mbarrier.arrive(kv_empty, count=1)  # every wgmma of the tile is done: K, V can take the next tile's
        store_rows(DK, dk, sm_scale, k_row0 + start_n, k_row0 + seq_k, kv_heads, i_hk, DIM, D_MAIN, D_REST)
        store_rows(DV, dv, 1.0, k_row0 + start_n, k_row0 + seq_k, kv_heads, i_hk, DIM, D_MAIN, D_REST)
    return slot + steps


@gluon.jit
def _store_dq(dq_smem, dq, D_MAIN: gl.constexpr, D_REST: gl.constexpr, VARLEN: gl.constexpr):
    """A step's dQ (a chunk tuple) into its fp32 shared tile, rows reordered for the reduce-add (`_bank_spread_rows`)
    unless VARLEN (a document's rows start anywhere: dq_finish reads them in order)."""
    if D_REST > 0:
        if VARLEN:
            dq_smem.slice(0, D_MAIN, 1).store(dq[0])
            dq_smem.slice(D_MAIN, D_REST, 1).store(dq[1])
        else:
            dq_smem.slice(0, D_MAIN, 1).store(_bank_spread_rows(dq[0]))
            dq_smem.slice(D_MAIN, D_REST, 1).store(_bank_spread_rows(dq[1]))
    else:
        if VARLEN:
            dq_smem.store(dq[0])
        else:
            dq_smem.store(_bank_spread_rows(dq[0]))


@functools.cache  # host time of a launch: made once per tile config
def layouts(block_m: int, block_n: int, head_dim: int, num_warps: int, dtype, swap_ab: bool = True) -> WsLayouts:
    """The kernel's register and shared layouts (its LAYOUTS constexpr) for num_warps compute warps and block_n
    keys: S^T / dP^T [BN, BM] (swap_ab) and dK / dV [BN, D] split by rows over all its warps; dQ [BM, D],
    and S / dP [BM, BN] without swap_ab, by rows over as many warps as BM has 16-row slices, the rest split the
    columns. head_dim: the data's (the tiles have tile_dim(head_dim) columns); *_r: the layouts of the second
    head-dim chunk (`head_dim_chunks`; the first's when there is one chunk)."""
    d_main, d_rest = head_dim_chunks(head_dim)
    tile = tile_dim(head_dim)
    warps_m = min(num_warps, block_m // 16)
    warps_kv = min(num_warps, block_n // 16)  # dK / dV rows; with fewer than 16 x num_warps keys the rest split D

    def split_by_rows(n_cols):  # [BM, n_cols] over num_warps warps: by 16-row slices of BM, then by columns
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps_m, num_warps // warps_m],
                                         instr_shape=[16, n_cols // (num_warps // warps_m), 16])

    def kv_layout(n_cols):  # [BN, n_cols] over num_warps warps: 16-row slices of BN, then columns
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps_kv, num_warps // warps_kv],
                                         instr_shape=[16, n_cols // (num_warps // warps_kv), 16])

    return WsLayouts(
        s=(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_m, 16])
           if swap_ab else split_by_rows(block_n)),
        kv=kv_layout(d_main), dq=split_by_rows(d_main), kv_r=kv_layout(d_rest or d_main),
        dq_r=split_by_rows(d_rest or d_main),
        ds_smem=gl.NVMMASharedLayout.get_default_for([block_n, block_m] if swap_ab else [block_m, block_n],
                                                     GL_DTYPES[dtype]),
        stats_smem=gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]),
        q_smem=gl.NVMMASharedLayout.get_default_for([block_m, tile], GL_DTYPES[dtype]),  # Q, dO tiles
        kv_smem=gl.NVMMASharedLayout.get_default_for([block_n, tile], GL_DTYPES[dtype]))  # K, V (dK, dV) tiles


def chunk_heads(device, seq_k: int, block_n: int, batch_kv_heads: int, longest_first: bool) -> int:
    """(batch, kv head) pairs per chunk of programs: about one wave of the GPU's SMs when longest_first (causal),
    else 1 (every head's key blocks in order)."""
    if not longest_first:
        return 1
    return max(1, min(batch_kv_heads, cdiv(sm_count(device), cdiv(seq_k, block_n))))


H100_SMS = 132  # what a compile check on a CPU (no GPU to ask) sizes the chunks for


@functools.cache
def sm_count(device) -> int:
    """The GPU's SM count (asked once per device), or H100_SMS off CUDA."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else H100_SMS


def query_steps(seq_q: int, seq_k: int, block_m: int, block_n: int, group: int, causal: bool,
                window_left: int = -1, window_right: int = -1) -> tuple:
    """Steps (query blocks x query heads of a kv head) of each key block, as `_tile` counts them."""
    shift = seq_k - seq_q
    right = 0 if causal else window_right
    steps = []
    for start_n in range(0, seq_k, block_n):
        m_lo = max(start_n - shift - right, 0) // block_m * block_m if right >= 0 else 0
        m_end = min(max(start_n + block_n - shift + window_left, 0), seq_q) if window_left >= 0 else seq_q
        steps.append(cdiv(max(m_end - m_lo, 0), block_m) * group)
    return tuple(steps)


def tile_key_block(tile: int, key_blocks: int, batch_kv_heads: int, chunk_heads: int) -> int:
    """The key block of a tile numbered as `_tile` numbers them (chunks of chunk_heads heads, key blocks in order)."""
    chunk, in_chunk = divmod(tile, chunk_heads * key_blocks)
    return in_chunk // min(chunk_heads, batch_kv_heads - chunk * chunk_heads)


TILE_SETUP_STEPS = 2  # what a tile costs beyond its steps (K, V, the dK, dV stores), in steps, for the schedule


@functools.cache
def tile_schedule(device, key_blocks: int, batch_kv_heads: int, chunk_heads: int, steps: tuple):
    """(tiles, tile_starts) int32 on device: program p walks tiles[tile_starts[p]:tile_starts[p + 1]], numbered as
    `_tile` numbers them. One program per SM; tiles go, in their order, to the program that frees first (as the
    hardware hands out the programs of a non-persistent grid), so the longest tiles start first under causal
    masking and the programs end together."""
    import heapq

    n_tiles = key_blocks * batch_kv_heads
    programs = min(n_tiles, sm_count(device))
    free_at = [(0, p) for p in range(programs)]  # (steps done, program)
    walks = [[] for _ in range(programs)]
    for tile in range(n_tiles):
        done, program = heapq.heappop(free_at)
        walks[program].append(tile)
        key_block = tile_key_block(tile, key_blocks, batch_kv_heads, chunk_heads)
        heapq.heappush(free_at, (done + steps[key_block] + TILE_SETUP_STEPS, program))
    starts = [0]
    for walk in walks:
        starts.append(starts[-1] + len(walk))
    as_int32 = functools.partial(torch.tensor, dtype=torch.int32, device=device)
    return as_int32([t for walk in walks for t in walk]), as_int32(starts)


def dq_rows(seq_q: int) -> int:
    """Rows per (batch, head) of the fp32 dQ accumulator: Nq rounded up to the 8-row groups that
    `_bank_spread_rows` reorders (a query's row stays inside its head's)."""
    return cdiv(seq_q, 8) * 8


def accumulator_descriptor(dq_acc: torch.Tensor, head_dim: int, block_m: int):
    """The TMA view of the fp32 dQ accumulator [rows, tile_dim(D)] (boxes [block_m, tile_dim(D)]). With two head-dim
    chunks the dQ tile's columns past D are never written, so the view is [rows, D] and the reduce-adds drop them;
    with one chunk they hold dS K's zeros and the whole width is added (whole boxes, as before head-dim chunks)."""
    def make():
        width = head_dim if head_dim_chunks(head_dim)[1] else dq_acc.shape[1]
        return TensorDescriptor(dq_acc, [dq_acc.shape[0], width], list(dq_acc.stride()), [block_m, dq_acc.shape[1]],
                                shared_layout((block_m, dq_acc.shape[1]), torch.float32))
    return cached_descriptor(("dq_acc", dq_acc.shape, dq_acc.stride(), head_dim, block_m), dq_acc, make)


def ws_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float, BLOCK_M: int, BLOCK_N: int,
                num_warps: int, num_stages: int, warp_specialize: bool = True, swap_ab: bool = True,
                longest_first: bool = True, persistent: bool = False, window_left: int = -1, window_right: int = -1,
                softcap: float = 0.0, varlen=None):
    """q, do [B, Nq, H, D], k, v [B, Nk, Hkv, D] dense, fp16 / bf16, D <= 256; lse (base 2), delta [B, H, Nq] fp32
    -> dq like q, dk / dv like k / v. window_left / window_right, softcap: score modifiers (ws_dkdv). varlen: a
    kernels.varlen.Packing, q / k ... [1, total, H, D], lse / delta [1, H, total_q]."""
    from kernels.dq_finish import dq_finish

    batch, seq_q, heads, head_dim = q.shape
    q, k, v, do = (t if dense_bnhd(t) else t.contiguous() for t in (q, k, v, do))
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    acc_rows = seq_q if varlen is not None else dq_rows(seq_q)  # packed: [H, total_q] rows, in order
    dq_acc = torch.zeros(batch * heads * acc_rows, tile_dim(head_dim), device=q.device,
                         dtype=torch.float32)  # [B * H * rows, tile_dim(D)]
    ws_dkdv(q, k, v, do, lse, delta, dk, dv, dq_acc, causal=causal, scale=scale, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
            num_warps=num_warps, num_stages=num_stages, warp_specialize=warp_specialize, swap_ab=swap_ab,
            longest_first=longest_first, persistent=persistent,
            window_left=window_left, window_right=window_right, softcap=softcap, varlen=varlen)
    dq = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    dq_finish(dq_acc.view(batch, heads, acc_rows, tile_dim(head_dim)), dq, scale, spread_rows=varlen is None)
    return dq, dk, dv


def ws_dkdv(q, k, v, do, lse, delta, dk, dv, dq_acc, *, causal: bool, scale: float, BLOCK_M: int, BLOCK_N: int,
            num_warps: int, num_stages: int, warp_specialize: bool = True, swap_ab: bool = True,
            longest_first: bool = True, persistent: bool = False, window_left: int = -1, window_right: int = -1,
            softcap: float = 0.0, varlen=None) -> None:
    """The main kernel's launch: dk, dv (like k, v, dense) and, given dq_acc ([B * H * dq_rows(Nq), tile_dim(D)]
    fp32, zeroed; packed: [H * total_q, tile_dim(D)]), dQ reduce-added into it; dq_acc=None (ws_two_pass,
    warp_specialize only): dk and dv alone. window_left / window_right: a sliding window as
    variants.problem.window_pair normalizes it (-1 = unbounded); softcap > 0: scores s -> softcap * tanh(s / softcap)
    (Gemma 2). varlen: a kernels.varlen.Packing (q ... [1, total, H, D]; not with persistent)."""
    batch, seq_q, heads, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    with_dq = dq_acc is not None
    if not with_dq and not warp_specialize:
        raise ValueError("ws_dkdv without dQ: warp_specialize only")
    if varlen is not None and persistent:
        raise ValueError("ws: persistent=true does not walk packed (varlen) batches yet; use persistent=false")
    windowed = window_left >= 0 or window_right >= 0
    masked = causal or windowed or varlen is not None or seq_q % BLOCK_M != 0 or seq_k % BLOCK_N != 0
    if seq_k == 0:
        dk.zero_()
        dv.zero_()
        return
    if dq_acc is None:  # no dQ: a placeholder descriptor (the kernel never touches it)
        dq_acc = torch.empty(BLOCK_M, tile_dim(head_dim), device=q.device, dtype=torch.float32)
    key_blocks = cdiv(seq_k, BLOCK_N)
    heads_per_chunk = chunk_heads(q.device, seq_k, BLOCK_N, batch * kv_heads, causal and longest_first)
    cu_q = cu_k = pairs = dq_acc  # unused unless varlen
    if varlen is not None:  # one program per (document, key block) pair and kv head, longest first under causal
        pairs = varlen.block_indices(block_k=BLOCK_N, heaviest_first=longest_first, causal=causal)  # [pairs, 2]
        cu_q, cu_k = varlen.cu_seqlens_q, varlen.cu_seqlens_k
        tiles = tile_starts = dq_acc  # unused
        grid = (pairs.shape[0] * kv_heads,)
    elif persistent:
        tiles, tile_starts = tile_schedule(q.device, key_blocks, batch * kv_heads, heads_per_chunk,
                                           query_steps(seq_q, seq_k, BLOCK_M, BLOCK_N, heads // kv_heads, causal,
                                                       window_left, window_right))
        grid = (tile_starts.numel() - 1,)
    else:
        tiles = tile_starts = dq_acc  # unused
        grid = (key_blocks * batch * kv_heads,)
    if grid[0] == 0:
        return
    d_main, d_rest = head_dim_chunks(head_dim)
    launch(_ws_backward_kernel, grid,
        q_desc=rows_descriptor(q, BLOCK_M), k_desc=rows_descriptor(k, BLOCK_N), v_desc=rows_descriptor(v, BLOCK_N),
        do_desc=rows_descriptor(do, BLOCK_M), dq_desc=accumulator_descriptor(dq_acc, head_dim, BLOCK_M),
        dk_desc=rows_descriptor(dk, BLOCK_N), dv_desc=rows_descriptor(dv, BLOCK_N),
        tensors=WsTensors(lse=lse, delta=delta, dk=dk, dv=dv),
        schedule=WsSchedule(tiles=tiles, tile_starts=tile_starts), docs=WsDocs(cu_q=cu_q, cu_k=cu_k, pairs=pairs),
        sizes=WsSizes(seq_q=seq_q, seq_k=seq_k, heads=heads, kv_heads=kv_heads, batch_kv_heads=batch * kv_heads,
                      chunk_heads=heads_per_chunk, qk_scale=scale * LOG2E, sm_scale=scale), DIM=head_dim,
        LAYOUTS=layouts(BLOCK_M, BLOCK_N, head_dim, num_warps, q.dtype, swap_ab), D_MAIN=d_main, D_REST=d_rest,
        STAGES=num_stages, CAUSAL=causal, MASKED=masked, WINDOW_LEFT=window_left,
        WINDOW_RIGHT=-1 if causal else window_right, SOFTCAP=float(softcap), WARP_SPECIALIZE=warp_specialize,
        SWAP_AB=swap_ab, PERSISTENT=persistent, VARLEN=varlen is not None, WITH_DQ=with_dq, num_warps=num_warps)
