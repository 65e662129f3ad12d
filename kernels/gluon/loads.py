"""The ws kernel's load role: TMA loads of K, V (once per tile) and of each step's Q, dO into the ring, with the
step's LSE and delta staged in shared memory beside them. `load_partition` is the 1-warp partition; `issue_kv` /
`issue_qdo` are what the compute warps call themselves without warp specialization."""
from kernels.gluon.compat import Value, aggregate, gl, gluon, mbarrier, tma_load
from kernels.gluon.scheduler import tile_at
from kernels.gluon.tiles import as_box


@aggregate
class Loads:
    """The TMA views the loads read: q, do_ [B * Nq, H, D | Dv] boxes [BM, 1, tile D | tile Dv]; k, v [B * Nk, Hkv,
    D | Dv] boxes [BN, 1, tile D | tile Dv] (Dv: V's head dim, issue 47). Chunk tiles (WsConfig.CHUNK_TILES,
    CHUNK_TILES_V): boxes D_MAIN wide, and *_r the same views' boxes of the second chunk (D_REST wide, at column
    D_MAIN); without them *_r are the main views again (never read)."""
    q: Value
    k: Value
    v: Value
    do_: Value
    q_r: Value
    k_r: Value
    v_r: Value
    do_r: Value

    def __init__(self, q, k, v, do_, q_r, k_r, v_r, do_r):
        self.q = q
        self.k = k
        self.v = v
        self.do_ = do_
        self.q_r = q_r
        self.k_r = k_r
        self.v_r = v_r
        self.do_r = do_r


@gluon.jit
def issue_kv(loads, smem, tile, CFG: gl.constexpr):
    """The tile's K and V into smem.k, smem.v (chunk tiles: and smem.rest's), signalling `kv_ready`."""
    # the bytes the boxes bring, as a constexpr (Triton 3.6's expect takes no tensor)
    K_BYTES: gl.constexpr = loads.k.block_type.nbytes + (loads.k_r.block_type.nbytes if CFG.CHUNK_TILES else 0)
    V_BYTES: gl.constexpr = loads.v.block_type.nbytes + (loads.v_r.block_type.nbytes if CFG.CHUNK_TILES_V else 0)
    mbarrier.expect(smem.kv_ready, K_BYTES + V_BYTES)
    i_hk = tile.i_hk // CFG.GROUP_SPLIT  # group_split: the tile's kv head is a slice of K's head i_hk // GROUP_SPLIT
    tma_load(loads.k, [tile.k_row0 + tile.start_n, i_hk, 0], smem.kv_ready, as_box(smem.k))
    tma_load(loads.v, [tile.k_row0 + tile.start_n, i_hk, 0], smem.kv_ready, as_box(smem.v))
    if CFG.CHUNK_TILES:
        tma_load(loads.k_r, [tile.k_row0 + tile.start_n, i_hk, CFG.D_MAIN], smem.kv_ready, as_box(smem.rest.k))
    if CFG.CHUNK_TILES_V:
        tma_load(loads.v_r, [tile.k_row0 + tile.start_n, i_hk, CFG.DV_MAIN], smem.kv_ready, as_box(smem.rest.v))


@gluon.jit
def issue_qdo(loads, smem, tile, step, slot, CFG: gl.constexpr):
    """The tile's step-th Q and dO tiles (chunk tiles: both chunks) into the ring stage of slot (steps counted
    across the program's tiles), signalling that stage's `ready`."""
    i_h, start_m = tile.query_block(step)
    stage = smem.ring.stage(slot)
    Q_BYTES: gl.constexpr = loads.q.block_type.nbytes + (loads.q_r.block_type.nbytes if CFG.CHUNK_TILES else 0)
    DO_BYTES: gl.constexpr = loads.do_.block_type.nbytes + (loads.do_r.block_type.nbytes if CFG.CHUNK_TILES_V else 0)
    mbarrier.expect(smem.ring.filled(slot), Q_BYTES + DO_BYTES)
    tma_load(loads.q, [tile.q_row0 + start_m, i_h, 0], smem.ring.filled(slot), as_box(smem.q.index(stage)))
    tma_load(loads.do_, [tile.q_row0 + start_m, i_h, 0], smem.ring.filled(slot), as_box(smem.do_.index(stage)))
    if CFG.CHUNK_TILES:
        tma_load(loads.q_r, [tile.q_row0 + start_m, i_h, CFG.D_MAIN], smem.ring.filled(slot),
                 as_box(smem.rest.q.index(stage)))
    if CFG.CHUNK_TILES_V:
        tma_load(loads.do_r, [tile.q_row0 + start_m, i_h, CFG.DV_MAIN], smem.ring.filled(slot),
                 as_box(smem.rest.do_.index(stage)))


@gluon.jit
def load_partition(loads, smem, program, sizes, stats, CFG: gl.constexpr):
    """One warp: per tile, K and V once the compute warps are done with the last tile's, then every step's Q, dO as
    soon as the dQ warp (or, without dQ, the compute warps) released its stage. loads: Loads; smem: WsSmem; program:
    ProgramTiles; sizes: TileSizes; stats: (LSE, DELTA)."""
    if CFG.PERSISTENT:
        slot = 0  # steps before this tile's, over the program's tiles: the ring's position
        for k in range(program.first, program.end):
            slot = _load_tile(k, slot, k - program.first, loads, smem, program, sizes, stats, CFG)
    else:
        _load_tile(program.first, 0, 0, loads, smem, program, sizes, stats, CFG)


@gluon.jit
def _load_tile(k, slot, tile_count, loads, smem, program, sizes, stats, CFG: gl.constexpr):
    """The k-th tile's loads, its steps at ring positions slot, slot + 1, ...; tile_count: the program's tiles
    before it -> the ring position after it."""
    LSE, DELTA = stats
    BLOCK_M: gl.constexpr = loads.q.block_type.shape[0]
    BLOCK_N: gl.constexpr = loads.k.block_type.shape[0]
    row_layout: gl.constexpr = gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0])
    tile = tile_at(k, program, sizes, BLOCK_M, BLOCK_N, CFG)
    mbarrier.wait(smem.kv_empty, (tile_count & 1) ^ 1)  # passes at once for the first tile
    issue_kv(loads, smem, tile, CFG)
    for step in range(tile.steps):
        # LSE and delta through shared memory: a global load in flight in the compute warps would hold back
        # their next wgmma (its fence waits for every pending register write)
        i_h, start_m = tile.query_block(step)
        o_m = start_m + gl.arange(0, BLOCK_M, layout=row_layout)
        row_stats = tile.stats_rows(i_h, o_m)
        lse = gl.load(LSE + row_stats, mask=o_m < tile.seq_q, other=float("inf"))  # [BM]; rows past Nq: P = 0
        delta = gl.load(DELTA + row_stats, mask=o_m < tile.seq_q, other=0.)  # [BM]
        stage = smem.ring.stage(slot + step)
        smem.ring.wait_free(slot + step)  # passes at once on the first lap
        smem.lse.index(stage).store(lse)
        smem.delta.index(stage).store(delta)
        issue_qdo(loads, smem, tile, step, slot + step, CFG)  # its `ready` releases the stores
    return slot + tile.steps
