"""Channels between the ws kernels' roles: a ring of shared-memory stages with its barriers (`Ring`) and the
shared tiles of each kernel as one record (`WsSmem`, `DqSmem`), allocated and initialized in one place.

A ring position is a step count `slot`, counted across a program's tiles: its stage is slot % STAGES and its
phase (slot // STAGES) & 1, as FlashAttention-3's PipelineState keeps index and phase. A producer waits until a
stage is free (`wait_free`: passes at once on the first lap), fills it and signals `filled(slot)` (a TMA load's
barrier); a consumer waits until it is full (`wait_full`) and hands it back (`release`).
"""
from kernels.gluon.compat import Value, aggregate, gl, gluon, mbarrier, smem_reinterpret


@aggregate
class Ring:
    """A STAGES-deep ring: ready [STAGES, 1] (a stage's tiles landed) and empty [STAGES, 1] (its readers are done)."""
    ready: Value
    empty: Value
    STAGES: gl.constexpr

    def __init__(self, ready, empty, STAGES):
        self.ready = ready
        self.empty = empty
        self.STAGES = gl.constexpr(STAGES)

    @gluon.jit
    def stage(self, slot):
        return slot % self.STAGES

    @gluon.jit
    def filled(self, slot):
        """The barrier the loads into slot's stage signal."""
        return self.ready.index(slot % self.STAGES)

    @gluon.jit
    def wait_full(self, slot):
        mbarrier.wait(self.ready.index(slot % self.STAGES), (slot // self.STAGES) & 1)

    @gluon.jit
    def wait_free(self, slot):
        mbarrier.wait(self.empty.index(slot % self.STAGES), ((slot // self.STAGES) & 1) ^ 1)

    @gluon.jit
    def release(self, slot):
        mbarrier.arrive(self.empty.index(slot % self.STAGES), count=1)


@gluon.jit
def ring(STAGES: gl.constexpr):
    """A Ring with its barriers allocated and initialized (count 1 each)."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    return Ring(ready, empty, STAGES)


@gluon.jit
def init_ring(r):
    for s in gl.static_range(r.STAGES):
        mbarrier.init(r.ready.index(s), count=1)
        mbarrier.init(r.empty.index(s), count=1)


@aggregate
class WsRest:
    """Chunk tiles (WsConfig.CHUNK_TILES, CHUNK_TILES_V): the second head-dim chunk of each D-wide (Dv-wide) tile,
    k, v [BN, D_REST | DV_REST], q, do_ [STAGES, BM, D_REST | DV_REST], dq [BM, D_REST] fp32, beside WsSmem's
    [., D_MAIN] tiles; without them, WsSmem's own tiles again (nothing allocated, never read)."""
    k: Value
    v: Value
    q: Value
    do_: Value
    dq: Value

    def __init__(self, k, v, q, do_, dq):
        self.k = k
        self.v = v
        self.q = q
        self.do_ = do_
        self.dq = dq


@aggregate
class WsSmem:
    """ws's shared tiles and barriers. k, v [BN, tile D | tile Dv] (a key block's, then its dK, dV on the way out);
    q, do_ [STAGES, BM, tile D | tile Dv] (the Q / dO ring; Dv: V's head dim, issue 47); ds, p: dS^T [BN, BM]
    (swap AB: p is ds, P^T stays in registers), else dS and P [BM, BN]; dq [BM, tile D] fp32 (a step's dQ for the
    reduce-add; [8, tile D] without dQ); lse, delta
    [STAGES, BM] (each stage's, staged by the load warp); kv_ready / kv_empty: a tile's K, V landed / its MMAs are
    done; ring: Q, dO stages; dq_full / dq_empty: a step's dQ to add / its reduce-add has read it. Chunk tiles: k, v,
    q, do_, dq are the first head-dim chunk's ([., D_MAIN]), rest (a WsRest) the second's."""
    k: Value
    v: Value
    q: Value
    do_: Value
    ds: Value
    p: Value
    dq: Value
    lse: Value
    delta: Value
    kv_ready: Value
    kv_empty: Value
    ring: Ring
    dq_full: Value
    dq_empty: Value
    rest: WsRest

    def __init__(self, k, v, q, do_, ds, p, dq, lse, delta, kv_ready, kv_empty, ring, dq_full, dq_empty, rest):
        self.k = k
        self.v = v
        self.q = q
        self.do_ = do_
        self.ds = ds
        self.p = p
        self.dq = dq
        self.lse = lse
        self.delta = delta
        self.kv_ready = kv_ready
        self.kv_empty = kv_empty
        self.ring = ring
        self.dq_full = dq_full
        self.dq_empty = dq_empty
        self.rest = rest


@gluon.jit
def ws_smem(q_desc, k_desc, v_desc, dq_desc, LAYOUTS: gl.constexpr, CFG: gl.constexpr):
    """ws's WsSmem, allocated (in this order) and its barriers initialized."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[2]  # the tiles' head dim: DIM rounded up (chunk tiles: D_MAIN)
    HEAD_DIM_V: gl.constexpr = v_desc.block_type.shape[2]  # V's and dO's: DIM_V rounded up (chunk tiles: DV_MAIN)
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    STAGES: gl.constexpr = CFG.STAGES
    dtype: gl.constexpr = q_desc.dtype
    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM_V], LAYOUTS.v_smem)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], LAYOUTS.q_smem)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM_V], LAYOUTS.do_smem)
    if CFG.SWAP_AB:  # dS^T [BN, BM] (P^T stays in registers)
        ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_M], LAYOUTS.ds_smem)
        p_smem = ds_smem
    else:  # dS and P [BM, BN]: A operands of dK, dV (read transposed) and dQ
        ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], LAYOUTS.ds_smem)
    if CFG.WITH_DQ:
        dq_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_DIM], dq_desc.layout)  # a step's dQ
    else:  # no dQ: a placeholder
        dq_smem = gl.allocate_shared_memory(gl.float32, [8, HEAD_DIM], dq_desc.layout)
    if not CFG.SWAP_AB:
        if CFG.P_IN_DQ:  # P over dQ's bytes (2 D >= BN): P is read before dQ is staged, and written after dQ's add
            p_smem = smem_reinterpret(dq_smem, dtype, [BLOCK_M, BLOCK_N], LAYOUTS.ds_smem)
        else:
            p_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], LAYOUTS.ds_smem)
    rest = _rest_tiles(k_smem, v_smem, q_smem, do_smem, dq_smem, dq_desc, LAYOUTS, CFG)
    lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], LAYOUTS.stats_smem)
    delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], LAYOUTS.stats_smem)
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    qdo = ring(STAGES)
    dq_full = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    dq_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    mbarrier.init(kv_empty, count=1)
    mbarrier.init(dq_full, count=1)
    mbarrier.init(dq_empty, count=1)
    init_ring(qdo)
    return WsSmem(k_smem, v_smem, q_smem, do_smem, ds_smem, p_smem, dq_smem, lse_smem, delta_smem, kv_ready, kv_empty,
                  qdo, dq_full, dq_empty, rest)


@gluon.jit
def _rest_tiles(k_smem, v_smem, q_smem, do_smem, dq_smem, dq_desc, LAYOUTS: gl.constexpr, CFG: gl.constexpr):
    """ws's WsRest: the second head-dim chunk's tiles (chunk tiles: their own allocations, in the main tiles'
    layouts: a chunk of >= 64 16-bit or 32-bit columns has the same 128-byte swizzle), else the main tiles."""
    BLOCK_M: gl.constexpr = q_smem.shape[1]
    BLOCK_N: gl.constexpr = k_smem.shape[0]
    STAGES: gl.constexpr = CFG.STAGES
    dtype: gl.constexpr = k_smem.dtype
    k_r = k_smem
    q_r = q_smem
    dq_r = dq_smem
    if CFG.CHUNK_TILES:
        k_r = gl.allocate_shared_memory(dtype, [BLOCK_N, CFG.D_REST], LAYOUTS.kv_smem)
        q_r = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, CFG.D_REST], LAYOUTS.q_smem)
        if CFG.WITH_DQ:
            dq_r = gl.allocate_shared_memory(gl.float32, [BLOCK_M, CFG.D_REST], dq_desc.layout)
    v_r = v_smem
    do_r = do_smem
    if CFG.CHUNK_TILES_V:
        v_r = gl.allocate_shared_memory(dtype, [BLOCK_N, CFG.DV_REST], LAYOUTS.v_smem)
        do_r = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, CFG.DV_REST], LAYOUTS.do_smem)
    return WsRest(k_r, v_r, q_r, do_r, dq_r)


@aggregate
class DqSmem:
    """ws_dq's shared tiles: q, do_ [BM, tile D | tile Dv] (resident; q carries dQ out), k, v [STAGES, BN, tile D |
    tile Dv] (the ring),
    q_ready: Q and dO landed; ring: K, V stages."""
    q: Value
    do_: Value
    k: Value
    v: Value
    q_ready: Value
    ring: Ring

    def __init__(self, q, do_, k, v, q_ready, ring):
        self.q = q
        self.do_ = do_
        self.k = k
        self.v = v
        self.q_ready = q_ready
        self.ring = ring


@gluon.jit
def dq_smem(q_desc, k_desc, v_desc, LAYOUTS: gl.constexpr, STAGES: gl.constexpr):
    """ws_dq's DqSmem, allocated (in this order) and its barriers initialized."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM_V: gl.constexpr = v_desc.block_type.shape[2]  # V's and dO's (issue 47)
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], LAYOUTS.q_smem)
    do_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM_V], LAYOUTS.do_smem)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM_V], LAYOUTS.v_smem)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv = ring(STAGES)
    mbarrier.init(q_ready, count=1)
    init_ring(kv)
    return DqSmem(q_smem, do_smem, k_smem, v_smem, q_ready, kv)
