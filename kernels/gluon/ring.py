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
class WsSmem:
    """ws's shared tiles and barriers. k, v [BN, tile D | tile Dv] (a key block's, then its dK, dV on the way out);
    q, do_ [STAGES, BM, tile D | tile Dv] (the Q / dO ring; Dv: V's head dim, issue 47); ds, p: dS^T [BN, BM]
    (swap AB: p is ds, P^T stays in registers), else dS and P [BM, BN]; dq [BM, tile D] fp32 (a step's dQ for the reduce-add; [8, tile D] without dQ); lse, delta
    [STAGES, BM] (each stage's, staged by the load warp); kv_ready / kv_empty: a tile's K, V landed / its MMAs are
    done; ring: Q, dO stages; dq_full / dq_empty: a step's dQ to add / its reduce-add has read it."""
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

    def __init__(self, k, v, q, do_, ds, p, dq, lse, delta, kv_ready, kv_empty, ring, dq_full, dq_empty):
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


@gluon.jit
def ws_smem(q_desc, k_desc, v_desc, dq_desc, LAYOUTS: gl.constexpr, CFG: gl.constexpr):
    """ws's WsSmem, allocated (in this order) and its barriers initialized."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[2]  # the tiles' head dim: DIM rounded up to a power of two
    HEAD_DIM_V: gl.constexpr = v_desc.block_type.shape[2]  # V's and dO's: DIM_V rounded up
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
                  qdo, dq_full, dq_empty)


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
