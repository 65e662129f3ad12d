"""The ws kernels' epilogues: what leaves a tile and how.

- dK, dV of a ws tile (`store_dk_dv`): a whole key block through K's and V's shared tiles by TMA stores; a tail
  block (its rows past Nk are the next batch's in the view) and fp32 partials (group_split, fp32_partials) by
  masked stores from registers (`store_rows`).
- dQ of a ws step (`stage_dq`, then the reduce-add role `dq_partition`): the tile into its fp32 shared tile, rows
  reordered for the stores' banks (`bank_spread_rows`), then one TMA reduce-add into the fp32 accumulator.
- dQ of a ws_dq program (`store_dq_out`): through Q's shared tile by a TMA store, a tail by masked stores.
Accumulators are tuples of head-dim chunks (kernels.gluon.tiles.head_dim_chunks).
"""
from kernels.gluon.compat import (Value, aggregate, cta_barrier, fence_async_shared, gl, gluon, mbarrier, tma,
                                  tma_reduce_add, tma_store)
from kernels.gluon.named import dq_warp_wait_full
from kernels.gluon.scheduler import tile_at
from kernels.gluon.tiles import ACC_COLUMN_THREAD_BITS, as_box, fresh_arange, head_chunks


@gluon.jit
def store_chunks(smem, acc, scale, D_MAIN: gl.constexpr, D_REST: gl.constexpr, rest=0,
                 CHUNKED: gl.constexpr = False):
    """scale * acc (a chunk tuple) into the shared tile's first D_MAIN + D_REST columns (CHUNKED: chunk 1 into the
    tile rest), in the tile's dtype."""
    if D_REST > 0:
        main_cols, rest_cols = head_chunks(smem, rest, D_MAIN, D_REST, CHUNKED)
        main_cols.store((acc[0] * scale).to(smem.dtype))
        rest_cols.store((acc[1] * scale).to(smem.dtype))
    else:
        smem.store((acc[0] * scale).to(smem.dtype))


@gluon.jit
def store_rows(PTR, acc, scale, row0, row_end, heads, i_h, DIM: gl.constexpr, D_MAIN: gl.constexpr,
               D_REST: gl.constexpr, FRESH: gl.constexpr = False):
    """scale * acc (a chunk tuple of [R, D] rows row0, row0 + 1, ... of head i_h) into dense [rows, heads, DIM] at PTR,
    rows from row_end on (the next batch's or document's) and columns past DIM left alone: masked stores. FRESH (a
    persistent program's tile loop): the column indices built here (tiles.fresh_arange), not hoisted and held."""
    store_chunk_rows(PTR, acc[0], scale, row0, row_end, heads, i_h, 0, DIM, FRESH)
    if D_REST > 0:
        store_chunk_rows(PTR, acc[1], scale, row0, row_end, heads, i_h, D_MAIN, DIM, FRESH)


@gluon.jit
def store_chunk_rows(PTR, tile, scale, row0, row_end, heads, i_h, col0: gl.constexpr, DIM: gl.constexpr,
                     FRESH: gl.constexpr = False):
    LAYOUT: gl.constexpr = tile.type.layout
    o_n = row0 + gl.arange(0, tile.shape[0], layout=gl.SliceLayout(1, LAYOUT))
    o_d = col0 + fresh_arange(tile.shape[1], gl.SliceLayout(0, LAYOUT), ACC_COLUMN_THREAD_BITS, FRESH)
    offsets = (gl.expand_dims(o_n, 1).to(gl.int64) * heads + i_h) * DIM + gl.expand_dims(o_d, 0)
    inside = (gl.expand_dims(o_n, 1) < row_end) & (gl.expand_dims(o_d, 0) < DIM)
    gl.store(PTR + offsets, (tile * scale).to(PTR.dtype.element_ty), mask=inside)


@aggregate
class DkDvOut:
    """Where a ws tile's dK and dV go: the TMA views dk_desc, dv_desc [B * Nk, Hkv, D | Dv] (boxes [BN, 1, tile D |
    tile Dv]; chunk tiles: D_MAIN | DV_MAIN wide, and dk_r, dv_r the second chunk's boxes, else the same views
    again), the dense tensors DK [B, Nk, Hkv, DIM], DV [B, Nk, Hkv, DIM_V] (a tail's masked stores), and dK's
    factor sm_scale."""
    dk_desc: Value
    dv_desc: Value
    dk_r: Value
    dv_r: Value
    DK: Value
    DV: Value
    sm_scale: Value

    def __init__(self, dk_desc, dv_desc, dk_r, dv_r, DK, DV, sm_scale):
        self.dk_desc = dk_desc
        self.dv_desc = dv_desc
        self.dk_r = dk_r
        self.dv_r = dv_r
        self.DK = DK
        self.DV = DV
        self.sm_scale = sm_scale if isinstance(sm_scale, Value) else gl.constexpr(sm_scale)


@gluon.jit
def store_dk_dv(smem, out, tile, dk, dv, CFG: gl.constexpr):
    """A ws tile's dK (x sm_scale) and dV out, then `kv_empty` (K, V can take the next tile's). smem: WsSmem;
    out: DkDvOut; tile: its Tile. dv: in V's head-dim chunks (CFG.DV_MAIN, CFG.DV_REST)."""
    dk_desc = out.dk_desc
    dv_desc = out.dv_desc
    DK = out.DK
    DV = out.DV
    sm_scale = out.sm_scale
    BLOCK_N: gl.constexpr = smem.k.shape[0]
    D_MAIN: gl.constexpr = CFG.D_MAIN
    D_REST: gl.constexpr = CFG.D_REST
    DIM: gl.constexpr = CFG.DIM
    # a whole key block (not fp32 partials): dK, dV through K's and V's shared tiles, by TMA
    if tile.start_n + BLOCK_N <= tile.seq_k and not CFG.FP32_PARTIALS:
        cta_barrier()  # every warpgroup's last wgmmas (which read all of K) are done
        store_chunks(smem.k, dk, sm_scale, D_MAIN, D_REST, smem.rest.k, CFG.CHUNK_TILES)
        store_chunks(smem.v, dv, 1.0, CFG.DV_MAIN, CFG.DV_REST, smem.rest.v, CFG.CHUNK_TILES_V)
        fence_async_shared()
        cta_barrier()
        # columns past DIM: outside the view, dropped
        tma_store(dk_desc, [tile.k_row0 + tile.start_n, tile.i_hk, 0], as_box(smem.k))
        tma_store(dv_desc, [tile.k_row0 + tile.start_n, tile.i_hk, 0], as_box(smem.v))
        if CFG.CHUNK_TILES:  # the second chunks' columns
            tma_store(out.dk_r, [tile.k_row0 + tile.start_n, tile.i_hk, D_MAIN], as_box(smem.rest.k))
        if CFG.CHUNK_TILES_V:
            tma_store(out.dv_r, [tile.k_row0 + tile.start_n, tile.i_hk, CFG.DV_MAIN], as_box(smem.rest.v))
        tma.store_wait(pendings=0)
        # K, V can take the next tile's (the arrive's barrier: in every warp, after the stores have read them)
        mbarrier.arrive(smem.kv_empty, count=1)
    else:  # a tail (its rows past Nk are the next batch's in the view) or fp32 partials: from registers
        mbarrier.arrive(smem.kv_empty, count=1)  # every wgmma of the tile is done: K, V can take the next tile's
        store_rows(DK, dk, sm_scale, tile.k_row0 + tile.start_n, tile.k_row0 + tile.seq_k, tile.kv_heads, tile.i_hk,
                   DIM, D_MAIN, D_REST)
        store_rows(DV, dv, 1.0, tile.k_row0 + tile.start_n, tile.k_row0 + tile.seq_k, tile.kv_heads, tile.i_hk,
                   CFG.DIM_V, CFG.DV_MAIN, CFG.DV_REST)


@gluon.jit
def bank_spread_rows(tile):
    """tile [R, C] (fp32, a wgmma accumulator) with its rows reordered within each group of 8: row 4 a + b -> 2 b + a
    (a < 2, b < 4). A 64-bit store of the accumulator writes 4 consecutive rows per half warp, 32 bytes each;
    under the 128-byte swizzle rows 2 i and 2 i + 1 share their banks (2-way conflicts: Nsight Compute counted
    34 M at D128 N4096, cuDNN 0.5 M). Reordered, the half warp writes rows 0, 2, 4, 6: distinct banks. The fp32
    accumulator holds rows in this order (`dq_finish(..., spread_rows=True)` reads them back)."""
    R: gl.constexpr = tile.shape[0]
    C: gl.constexpr = tile.shape[1]
    return gl.reshape(gl.permute(gl.reshape(tile, [R // 8, 2, 4, C]), [0, 2, 1, 3]), [R, C])


@gluon.jit
def stage_dq(dq_smem, dq_r, dq, D_MAIN: gl.constexpr, D_REST: gl.constexpr, VARLEN: gl.constexpr,
             CHUNKED: gl.constexpr = False):
    """A step's dQ (a chunk tuple) into its fp32 shared tile (CHUNKED: chunk 1 into the tile dq_r), rows reordered
    for the reduce-add (`bank_spread_rows`) unless VARLEN (a document's rows start anywhere: dq_finish reads them
    in order)."""
    if D_REST > 0:
        main_cols, rest_cols = head_chunks(dq_smem, dq_r, D_MAIN, D_REST, CHUNKED)
        if VARLEN:
            main_cols.store(dq[0])
            rest_cols.store(dq[1])
        else:
            main_cols.store(bank_spread_rows(dq[0]))
            rest_cols.store(bank_spread_rows(dq[1]))
    else:
        if VARLEN:
            dq_smem.store(dq[0])
        else:
            dq_smem.store(bank_spread_rows(dq[0]))


@gluon.jit
def dq_partition(dq_desc, dq_r_desc, smem, program, sizes, CFG: gl.constexpr):
    """The reduce-add role (one warp): adds each step's dQ tile from smem.dq (chunk tiles: and smem.rest.dq, by
    dq_r_desc's boxes at column D_MAIN) into the fp32 accumulator ([B * H * Nq, D]) by TMA, and hands the step's Q / dO stage back to the load warp (dq_full means all of the step's MMAs are
    done). program: ProgramTiles; sizes: TileSizes."""
    if CFG.PERSISTENT:
        slot = 0
        for k in range(program.first, program.end):
            slot = _dq_tile(k, slot, dq_desc, dq_r_desc, smem, program, sizes, CFG)
    else:
        _dq_tile(program.first, 0, dq_desc, dq_r_desc, smem, program, sizes, CFG)


@gluon.jit
def _dq_tile(k, slot, dq_desc, dq_r_desc, smem, program, sizes, CFG: gl.constexpr):
    BLOCK_M: gl.constexpr = dq_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = smem.k.shape[0]
    tile = tile_at(k, program, sizes, BLOCK_M, BLOCK_N, CFG)
    for step in range(tile.steps):
        i_h, start_m = tile.query_block(step)
        if CFG.NAMED_HANDOVER:  # every compute thread has arrived on the named barrier (kernels.gluon.named)
            dq_warp_wait_full()
        else:
            mbarrier.wait(smem.dq_full, (slot + step) & 1)
        tma_reduce_add(dq_desc, [tile.dq_row(i_h, start_m), 0], smem.dq)
        if CFG.CHUNK_TILES:  # the second chunk's columns
            tma_reduce_add(dq_r_desc, [tile.dq_row(i_h, start_m), CFG.D_MAIN], smem.rest.dq)
        smem.ring.release(slot + step)  # the step's MMAs are done: stage free
        tma.store_wait(pendings=0)
        mbarrier.arrive(smem.dq_empty, count=1)
    return slot + tile.steps


@gluon.jit
def store_dq_out(dq_desc, smem, prog, DQ, dq, sm_scale, CFG: gl.constexpr):
    """ws_dq's dQ (x sm_scale) out: a whole query block through Q's shared tile by TMA; a tail (its rows past Nq are
    the next batch's or document's in the view) by masked stores. smem: DqSmem; prog: its DqProgram."""
    BLOCK_M: gl.constexpr = smem.q.shape[0]
    D_MAIN: gl.constexpr = CFG.D_MAIN
    D_REST: gl.constexpr = CFG.D_REST
    DIM: gl.constexpr = CFG.DIM
    if prog.start_m + BLOCK_M <= prog.seq_q:  # a whole query block: out through Q's shared tile by TMA
        cta_barrier()  # every warpgroup's wgmmas that read Q are done
        store_chunks(smem.q, dq, sm_scale, D_MAIN, D_REST)
        fence_async_shared()
        cta_barrier()
        # columns past DIM: outside the view, dropped
        tma_store(dq_desc, [prog.q_row0 + prog.start_m, prog.i_h, 0], as_box(smem.q))
        tma.store_wait(pendings=0)
    else:  # a tail: its rows past Nq are the next batch's (document's) in the view
        store_rows(DQ, dq, sm_scale, prog.q_row0 + prog.start_m, prog.q_row0 + prog.seq_q, prog.heads, prog.i_h, DIM,
                   D_MAIN, D_REST)
