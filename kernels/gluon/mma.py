"""The ws kernel's MMA role: the compute warps. Per step the five matmuls (async wgmma) and the softmax gradient
(`gradients` with swap AB, `gradients_mn` without), the step's dQ handed to the reduce-add role (or, without warp
specialization, added here), and at the end of a tile its dK and dV out (kernels.gluon.epilogue.store_dk_dv)."""
from kernels.gluon.compat import cta_barrier, fence_async_shared, gl, gluon, mbarrier, tma, tma_reduce_add, \
    warpgroup_mma_init, warpgroup_mma_wait
from kernels.gluon.epilogue import stage_dq, store_dk_dv
from kernels.gluon.loads import issue_kv, issue_qdo
from kernels.gluon.named import compute_arrive_dq_full
from kernels.gluon.scheduler import tile_at
from kernels.gluon.tiles import chunk_zeros, issue_product, mma_chunks, probabilities


@gluon.jit
def mma_partition(smem, program, sizes, stores, stats, qk_scale, LAYOUTS: gl.constexpr, CFG: gl.constexpr,
                  loads=None, dq_desc=None, dq_r_desc=None):
    """The compute warps: per tile, per step, the five matmuls and the softmax gradient; at the end of a tile they
    store its dK (scaled) and dV (stores: a kernels.gluon.epilogue.DkDvOut). stats: (LSE, DELTA). With
    CFG.WARP_SPECIALIZE the loads and reduce-adds are other warps' (signalled through mbarriers); else issued here
    (loads: Loads, dq_desc (chunk tiles: and dq_r_desc, the second chunk's boxes): given). CFG.WITH_DQ=False: dK and dV only, each step's stage handed back here."""
    if CFG.PERSISTENT:
        slot = 0  # steps before this tile's, over the program's tiles: the ring's and the dQ hand-over's position
        for k in range(program.first, program.end):
            slot = _mma_tile(k, slot, k - program.first, smem, program, sizes, stores, stats, qk_scale, LAYOUTS, CFG,
                             loads, dq_desc, dq_r_desc)
    else:
        _mma_tile(program.first, 0, 0, smem, program, sizes, stores, stats, qk_scale, LAYOUTS, CFG, loads, dq_desc,
                  dq_r_desc)


@gluon.jit
def _issue_s(smem, slot, LAYOUTS: gl.constexpr, CFG: gl.constexpr):
    """Waits for ring position slot's Q, dO, then issues its S^T = K Q^T (swap AB), else S = Q K^T: async wgmma
    groups in flight, one per head-dim chunk (`issue_product`)."""
    S_LAYOUT: gl.constexpr = LAYOUTS.s
    smem.ring.wait_full(slot)
    q_tile = smem.q.index(smem.ring.stage(slot))
    q_r = smem.rest.q.index(smem.ring.stage(slot))  # chunk tiles: Q's second chunk (else q_tile, unread)
    if CFG.SWAP_AB:
        s = issue_product(smem.k, q_tile, S_LAYOUT, CFG.D_MAIN, CFG.D_REST, smem.rest.k, q_r, CFG.CHUNK_TILES)
    else:
        s = issue_product(q_tile, smem.k, S_LAYOUT, CFG.D_MAIN, CFG.D_REST, q_r, smem.rest.k, CFG.CHUNK_TILES)
    return s


@gluon.jit
def _issue_dp(smem, slot, LAYOUTS: gl.constexpr, CFG: gl.constexpr):
    """dP^T = V dO^T (swap AB), else dP = dO V^T, of ring position slot (its stage full): like `_issue_s`, over V's
    head dim (its chunks CFG.DV_MAIN, CFG.DV_REST)."""
    S_LAYOUT: gl.constexpr = LAYOUTS.s
    do_tile = smem.do_.index(smem.ring.stage(slot))
    do_r = smem.rest.do_.index(smem.ring.stage(slot))
    if CFG.SWAP_AB:
        dp = issue_product(smem.v, do_tile, S_LAYOUT, CFG.DV_MAIN, CFG.DV_REST, smem.rest.v, do_r, CFG.CHUNK_TILES_V)
    else:
        dp = issue_product(do_tile, smem.v, S_LAYOUT, CFG.DV_MAIN, CFG.DV_REST, do_r, smem.rest.v, CFG.CHUNK_TILES_V)
    return dp


@gluon.jit
def _wait_chunks3(n: gl.constexpr, x, y, z, D_REST: gl.constexpr, DV_REST: gl.constexpr):
    """warpgroup_mma_wait(num_outstanding=n) on three chunk tuples -> (x, y, z): x, y in D's chunks (dQ, dK), z in
    V's (dV)."""
    if D_REST > 0:
        if DV_REST > 0:
            x0, x1, y0, y1, z0, z1 = warpgroup_mma_wait(num_outstanding=n, deps=(x[0], x[1], y[0], y[1], z[0], z[1]))
            return (x0, x1), (y0, y1), (z0, z1)
        else:
            x0, x1, y0, y1, z0 = warpgroup_mma_wait(num_outstanding=n, deps=(x[0], x[1], y[0], y[1], z[0]))
            return (x0, x1), (y0, y1), (z0,)
    else:
        if DV_REST > 0:
            x0, y0, z0, z1 = warpgroup_mma_wait(num_outstanding=n, deps=(x[0], y[0], z[0], z[1]))
            return (x0,), (y0,), (z0, z1)
        else:
            x0, y0, z0 = warpgroup_mma_wait(num_outstanding=n, deps=(x[0], y[0], z[0]))
            return (x0,), (y0,), (z0,)


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
def _dk_from_registers(ds_t, q_tile, q_r, dk, LAYOUTS: gl.constexpr, CFG: gl.constexpr):
    """dK += dS^T Q with dS^T [BN, BM] as the register A operand (swap AB) -> dk [BN, D] as head-dim chunks, one
    async wgmma group per chunk in flight."""
    P_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=LAYOUTS.kv, k_width=2)
    P_OPERAND_R: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=LAYOUTS.kv_r, k_width=2)
    return mma_chunks(gl.convert_layout(ds_t, P_OPERAND), gl.convert_layout(ds_t, P_OPERAND_R), q_tile, dk,
                      CFG.D_MAIN, CFG.D_REST, b_r=q_r, CHUNKED=CFG.CHUNK_TILES)  # [BN, BM] @ [BM, D]


@gluon.jit
def _dq_product(ds, smem, BLOCK_M: gl.constexpr, LAYOUTS: gl.constexpr, CFG: gl.constexpr):
    """dQ = dS K from dS [BM, BN] in shared memory (swap AB: dS^T's tile permuted) -> dq [BM, D] as head-dim
    chunks, a fresh accumulator, one async wgmma group per chunk in flight."""
    DQ_LAYOUT: gl.constexpr = LAYOUTS.dq  # passed on to a jit function: bound as a constexpr (Triton 3.6)
    DQ_LAYOUT_R: gl.constexpr = LAYOUTS.dq_r
    return mma_chunks(ds, ds, smem.k, chunk_zeros(BLOCK_M, DQ_LAYOUT, DQ_LAYOUT_R, CFG.D_MAIN, CFG.D_REST),
                      CFG.D_MAIN, CFG.D_REST, use_acc=False, b_r=smem.rest.k,
                      CHUNKED=CFG.CHUNK_TILES)  # [BM, BN] @ [BN, D] -> [BM, D]


@gluon.jit
def _softcap_grad(ds, t, SOFTCAP: gl.constexpr):
    """dS with respect to the capped score -> with respect to the scaled score (d tanh = 1 - tanh^2)."""
    if SOFTCAP > 0:
        ds = ds * (1.0 - t * t)
    return ds


@gluon.jit
def _probabilities(s, lse, o_m, start_n, start_m, tile, qk_scale, KEYS_ON_ROWS: gl.constexpr, CFG: gl.constexpr,
                   MASK: gl.constexpr):
    """MASK=False: a step of an unmasked run (CFG.SPLIT_MASKED), compiled without the mask."""
    return probabilities(s, lse, o_m, start_n, start_m, tile.seq_q, tile.seq_k, qk_scale, KEYS_ON_ROWS, CFG.CAUSAL,
                         CFG.WINDOW_LEFT, CFG.WINDOW_RIGHT, CFG.SOFTCAP, CFG.MASKED and MASK, True)  # KEY_BLOCK_FIXED


@gluon.jit
def gradients(s_t, dp_t, lse, delta, dk, dv, q_tile, do_tile, q_r, do_r, smem, o_m, start_m, tile, qk_scale,
              LAYOUTS: gl.constexpr, CFG: gl.constexpr, MASK: gl.constexpr = True):
    """One step from its S^T, dP^T in flight (the last wgmma groups): P^T and dS^T, then dV += P^T dO,
    dK += dS^T Q and dQ = dS K issued -> (dq [BM, D], dk [BN, D], dv [BN, Dv]) as head-dim chunk tuples, in
    flight (Dv: V's head dim, in its chunks CFG.DV_MAIN, CFG.DV_REST). q_r, do_r: the stage's second-chunk tiles
    (chunk tiles; else q_tile, do_tile again, unread)."""
    BLOCK_M: gl.constexpr = q_tile.shape[0]
    ds_smem = smem.ds
    dtype: gl.constexpr = smem.k.dtype
    CHUNKS_V: gl.constexpr = 2 if CFG.DV_REST > 0 else 1  # wgmma groups of a product over Dv (dP^T, dV)
    PV_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=LAYOUTS.kv_v, k_width=2)
    PV_OPERAND_R: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=LAYOUTS.kv_vr, k_width=2)
    s_t = warpgroup_mma_wait(num_outstanding=CHUNKS_V, deps=(s_t,))  # dP^T's groups still in flight
    if CFG.LATE_STATS:  # lse, delta: the stage's shared tiles, each loaded just before its use
        lse = lse.load(gl.SliceLayout(0, LAYOUTS.s))  # [BM]
    p_t, t_t = _probabilities(s_t, lse, o_m, tile.start_n, start_m, tile, qk_scale, True, CFG, MASK)  # [BN, BM]
    p_lo = p_t.to(dtype)
    dv = mma_chunks(gl.convert_layout(p_lo, PV_OPERAND), gl.convert_layout(p_lo, PV_OPERAND_R), do_tile, dv,
                    CFG.DV_MAIN, CFG.DV_REST, b_r=do_r, CHUNKED=CFG.CHUNK_TILES_V)  # [BN, BM] @ [BM, Dv]
    dp_t = warpgroup_mma_wait(num_outstanding=CHUNKS_V, deps=(dp_t,))  # dV's groups still in flight
    if CFG.LATE_STATS:  # LSE is dead by now
        delta = delta.load(gl.SliceLayout(0, LAYOUTS.s))  # [BM]
    ds_t = _softcap_grad(p_t * (dp_t - gl.expand_dims(delta, 0)), t_t, CFG.SOFTCAP).to(dtype)  # [BN, BM]
    if CFG.WITH_DQ:
        ds_smem.store(ds_t)
    if not CFG.DQ_FIRST:  # dK's wgmma in flight through the dS^T barrier
        dk = _dk_from_registers(ds_t, q_tile, q_r, dk, LAYOUTS, CFG)
    if CFG.WITH_DQ:
        fence_async_shared()
        cta_barrier()  # every warpgroup's rows of dS^T are in shared memory before dQ reads all of them
        dq = _dq_product(ds_smem.permute((1, 0)), smem, BLOCK_M, LAYOUTS, CFG)
    if CFG.DQ_FIRST:  # dK's wgmma after dQ's: in flight through dQ's staging and hand-over (`_mma_step`)
        dk = _dk_from_registers(ds_t, q_tile, q_r, dk, LAYOUTS, CFG)
    if not CFG.WITH_DQ:
        dq = dk  # no dQ (ws_two_pass): a placeholder
    return dq, dk, dv


@gluon.jit
def gradients_mn(s, dp, lse, delta, dk, dv, q_tile, do_tile, q_r, do_r, smem, o_m, start_m, tile, qk_scale,
                 LAYOUTS: gl.constexpr, CFG: gl.constexpr, pos=0, MASK: gl.constexpr = True):
    """Without swap AB (each warpgroup owns query rows of S, dP): P and dS go to shared memory, where dV += P^T dO
    and dK += dS^T Q read them transposed (each warpgroup its key rows) and dQ = dS K as they are
    -> (dq [BM, D], dk [BN, D], dv [BN, Dv]), their three wgmma groups in flight."""
    BLOCK_M: gl.constexpr = q_tile.shape[0]
    p_smem = smem.p
    ds_smem = smem.ds
    dtype: gl.constexpr = smem.k.dtype
    CHUNKS_V: gl.constexpr = 2 if CFG.DV_REST > 0 else 1  # wgmma groups of a product over Dv (dP, dV)
    s = warpgroup_mma_wait(num_outstanding=CHUNKS_V, deps=(s,))  # dP's groups still in flight
    p, t = _probabilities(s, lse, o_m, tile.start_n, start_m, tile, qk_scale, False, CFG, MASK)  # [BM, BN]
    if CFG.P_IN_DQ:  # P's bytes are dQ's: the last step's reduce-add (ring position pos - 1) has read them
        if CFG.WARP_SPECIALIZE:
            mbarrier.wait(smem.dq_empty, (pos & 1) ^ 1)
        else:
            tma.store_wait(pendings=0)
            cta_barrier()  # the issuing thread's wait, before any warp writes
    p_smem.store(p.to(dtype))
    if CFG.EARLY_DV:  # dV's wgmma in flight while dS is computed: P's rows from every warpgroup first
        fence_async_shared()
        cta_barrier()
        dv = mma_chunks(p_smem.permute((1, 0)), p_smem.permute((1, 0)), do_tile, dv, CFG.DV_MAIN, CFG.DV_REST,
                        b_r=do_r, CHUNKED=CFG.CHUNK_TILES_V)
        dp = warpgroup_mma_wait(num_outstanding=CHUNKS_V, deps=(dp,))  # dP's groups came before dV's
    else:
        dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp,))
    ds = _softcap_grad(p * (dp - gl.expand_dims(delta, 1)), t, CFG.SOFTCAP).to(dtype)  # [BM, BN]
    ds_smem.store(ds)
    fence_async_shared()
    cta_barrier()  # every warpgroup's rows of P and dS are in shared memory before the wgmmas read all of them
    if CFG.DQ_FIRST:  # dQ's wgmma first: dV's and dK's in flight through its staging and hand-over (`_mma_step`)
        dq = _dq_product(ds_smem, smem, BLOCK_M, LAYOUTS, CFG)
    if not CFG.EARLY_DV:  # [BN, BM] @ [BM, Dv]
        dv = mma_chunks(p_smem.permute((1, 0)), p_smem.permute((1, 0)), do_tile, dv, CFG.DV_MAIN, CFG.DV_REST,
                        b_r=do_r, CHUNKED=CFG.CHUNK_TILES_V)
    dk = mma_chunks(ds_smem.permute((1, 0)), ds_smem.permute((1, 0)), q_tile, dk, CFG.D_MAIN, CFG.D_REST, b_r=q_r,
                    CHUNKED=CFG.CHUNK_TILES)
    if CFG.WITH_DQ and not CFG.DQ_FIRST:
        dq = _dq_product(ds_smem, smem, BLOCK_M, LAYOUTS, CFG)
    elif not CFG.WITH_DQ:
        dq = dk  # no dQ (ws_two_pass): a placeholder
    return dq, dk, dv


@gluon.jit
def _mma_step(step, slot, tile, s_t, dk, dv, smem, stats, qk_scale, LAYOUTS: gl.constexpr, CFG: gl.constexpr, loads,
              dq_desc, dq_r_desc, NEXT: gl.constexpr, MASK: gl.constexpr = True):
    """The tile's step at ring position slot + step -> (the next step's S in flight (NEXT) or a placeholder, dk, dv).
    s_t: this step's S, done (CFG.PREFETCH), else None: issued here. NEXT: the next step's S issued before this
    step's tail (the dQ wait and hand-over), so the tensor pipe has work through it, and waited at its end.
    MASK=False: a step of an unmasked run (CFG.SPLIT_MASKED), compiled without the mask."""
    LSE, DELTA = stats
    SPECIALIZED: gl.constexpr = CFG.WARP_SPECIALIZE
    STAGES: gl.constexpr = CFG.STAGES
    D_MAIN: gl.constexpr = CFG.D_MAIN
    D_REST: gl.constexpr = CFG.D_REST
    CHUNKS: gl.constexpr = 2 if D_REST > 0 else 1  # wgmma groups per product
    BLOCK_M: gl.constexpr = smem.q.shape[1]
    # S^T [BN, BM] (swap AB: keys on dim 0) or S [BM, BN]: query-indexed vectors are slices along the key dim
    KEY_DIM: gl.constexpr = 0 if CFG.SWAP_AB else 1
    S_LAYOUT: gl.constexpr = LAYOUTS.s  # layouts passed on to jit functions: bound as constexprs (Triton 3.6)
    if not SPECIALIZED:  # refill the stage that the previous step finished with
        if step + STAGES - 1 < tile.steps:
            issue_qdo(loads, smem, tile, step + STAGES - 1, slot + step + STAGES - 1, CFG)
    stage = smem.ring.stage(slot + step)
    i_h, start_m = tile.query_block(step)
    o_m = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(KEY_DIM, S_LAYOUT))  # query of each S column
    q_tile = smem.q.index(stage)
    do_tile = smem.do_.index(stage)
    q_r = smem.rest.q.index(stage)  # chunk tiles: the second chunks' (else q_tile, do_tile again, unread)
    do_r = smem.rest.do_.index(stage)
    if not CFG.PREFETCH:
        s_t = _issue_s(smem, slot + step, LAYOUTS, CFG)
    dp_t = _issue_dp(smem, slot + step, LAYOUTS, CFG)
    if CFG.LATE_STATS:  # swap AB, specialized: `gradients` loads each from the stage's tile at its use
        lse = smem.lse.index(stage)
        delta = smem.delta.index(stage)
    elif SPECIALIZED:  # staged by the load warp with this stage's Q, dO
        lse = smem.lse.index(stage).load(gl.SliceLayout(KEY_DIM, S_LAYOUT))  # [BM]
        delta = smem.delta.index(stage).load(gl.SliceLayout(KEY_DIM, S_LAYOUT))  # [BM]
    else:
        row_stats = tile.stats_rows(i_h, o_m)
        lse = gl.load(LSE + row_stats, mask=o_m < tile.seq_q, other=float("inf"))  # [BM]; rows past Nq: P = 0
        delta = gl.load(DELTA + row_stats, mask=o_m < tile.seq_q, other=0.)  # [BM]
    if CFG.SWAP_AB:
        dq, dk, dv = gradients(s_t, dp_t, lse, delta, dk, dv, q_tile, do_tile, q_r, do_r, smem, o_m, start_m, tile,
                               qk_scale, LAYOUTS, CFG, MASK)
    else:
        dq, dk, dv = gradients_mn(s_t, dp_t, lse, delta, dk, dv, q_tile, do_tile, q_r, do_r, smem, o_m, start_m,
                                  tile, qk_scale, LAYOUTS, CFG, slot + step, MASK)
    if CFG.DQ_FIRST:  # dQ done; dK's groups (and without swap AB, unless issued early, dV's) still in flight
        CHUNKS_V: gl.constexpr = 2 if CFG.DV_REST > 0 else 1
        LATER: gl.constexpr = CHUNKS + (CHUNKS_V if not CFG.SWAP_AB and not CFG.EARLY_DV else 0)
        dq = _wait_chunks1(LATER, dq, D_REST)
    else:
        dq, dk, dv = _wait_chunks3(0, dq, dk, dv, D_REST, CFG.DV_REST)
    if NEXT:  # the next step's S in flight through this step's tail (dQ to shared memory and handed over)
        s_next = _issue_s(smem, slot + step + 1, LAYOUTS, CFG)
    else:
        s_next = dp_t  # a placeholder (never read)
    if not CFG.WITH_DQ:  # ws_two_pass's dK/dV kernel: the step's MMAs done, its stage goes back to the load warp
        smem.ring.release(slot + step)
    else:
        if SPECIALIZED:
            mbarrier.wait(smem.dq_empty, ((slot + step) & 1) ^ 1)  # the last reduce-add has read smem.dq
        else:
            tma.store_wait(pendings=0)
        stage_dq(smem.dq, smem.rest.dq, dq, D_MAIN, D_REST, CFG.VARLEN, CFG.CHUNK_TILES)
        fence_async_shared()
        if CFG.NAMED_HANDOVER:  # a named barrier's arrive: no waiting for the other warpgroup (needs 8 warps)
            compute_arrive_dq_full()
        elif SPECIALIZED:  # the arrive waits for every compute warp (a barrier), then one thread signals
            mbarrier.arrive(smem.dq_full, count=1)  # also frees the stage (the dQ warp passes it on)
        else:
            cta_barrier()
            tma_reduce_add(dq_desc, [tile.dq_row(i_h, start_m), 0], smem.dq)
            if CFG.CHUNK_TILES:  # the second chunk's columns
                tma_reduce_add(dq_r_desc, [tile.dq_row(i_h, start_m), D_MAIN], smem.rest.dq)
    if NEXT:  # waited here: an accumulator in flight across the loop's back edge makes ptxas serialize (C7514)
        s_next = warpgroup_mma_wait(num_outstanding=0, deps=(s_next,))
    if CFG.DQ_FIRST:  # dK (and dV) waited at the step's end, for the same reason
        dq, dk, dv = _wait_chunks3(0, dq, dk, dv, D_REST, CFG.DV_REST)
    return s_next, dk, dv


@gluon.jit
def _mma_tile(k, slot, tile_count, smem, program, sizes, stores, stats, qk_scale, LAYOUTS: gl.constexpr,
              CFG: gl.constexpr, loads, dq_desc, dq_r_desc):
    """The k-th tile, its steps at ring positions slot, slot + 1, ... (tile_count: the program's tiles before it)
    -> the ring position after it."""
    SPECIALIZED: gl.constexpr = CFG.WARP_SPECIALIZE
    STAGES: gl.constexpr = CFG.STAGES
    D_MAIN: gl.constexpr = CFG.D_MAIN
    D_REST: gl.constexpr = CFG.D_REST
    BLOCK_N: gl.constexpr = smem.k.shape[0]
    BLOCK_M: gl.constexpr = smem.q.shape[1]
    KV_LAYOUT: gl.constexpr = LAYOUTS.kv
    KV_LAYOUT_R: gl.constexpr = LAYOUTS.kv_r
    V_LAYOUT: gl.constexpr = LAYOUTS.kv_v
    V_LAYOUT_R: gl.constexpr = LAYOUTS.kv_vr
    tile = tile_at(k, program, sizes, BLOCK_M, BLOCK_N, CFG)
    if not SPECIALIZED:  # K, V and the first STAGES - 1 steps' Q, dO (one tile per program: nothing to wait)
        issue_kv(loads, smem, tile, CFG)
        for s in gl.static_range(STAGES - 1):
            if s < tile.steps:
                issue_qdo(loads, smem, tile, s, slot + s, CFG)
    dk = chunk_zeros(BLOCK_N, KV_LAYOUT, KV_LAYOUT_R, D_MAIN, D_REST)  # [BN, D] as head-dim chunks
    dv = chunk_zeros(BLOCK_N, V_LAYOUT, V_LAYOUT_R, CFG.DV_MAIN, CFG.DV_REST)  # [BN, Dv]
    mbarrier.wait(smem.kv_ready, tile_count & 1)
    if CFG.PREFETCH:  # step 0's S issued here, each later step's at the end of the step before (the last peeled)
        if tile.steps > 0:
            s_t = warpgroup_mma_wait(num_outstanding=0, deps=(_issue_s(smem, slot, LAYOUTS, CFG),))
            for step in range(tile.steps - 1):
                s_t, dk, dv = _mma_step(step, slot, tile, s_t, dk, dv, smem, stats, qk_scale, LAYOUTS, CFG, loads,
                                        dq_desc, dq_r_desc, True)
            _, dk, dv = _mma_step(tile.steps - 1, slot, tile, s_t, dk, dv, smem, stats, qk_scale, LAYOUTS, CFG,
                                    loads, dq_desc, dq_r_desc, False)
    else:
        if CFG.NAMED_HANDOVER:  # without the arrive, Triton's barrier analysis puts one at the loop's top for the
            # accesses before the loop, run on every step; here it runs once, and the loop's is the dS^T store's,
            # next to the dS^T barrier: the two warpgroups then meet once a step
            # (results/h100/gluon/ab_issue43/named_preloop)
            cta_barrier()
        if CFG.SPLIT_MASKED:  # per query head: the masked lead, the unmasked middle, the masked tail, in step order
            lead, body_end = tile.unmasked_run(BLOCK_N, CFG)
            for run in range(3 * tile.group):  # one masked and one unmasked step body, whatever the runs
                first = run // 3 * tile.m_blocks
                part = run % 3
                lo = first + gl.where(part == 0, 0, gl.where(part == 1, lead, body_end))
                hi = first + gl.where(part == 0, lead, gl.where(part == 1, body_end, tile.m_blocks))
                if part == 1:
                    for step in range(lo, hi):
                        _, dk, dv = _mma_step(step, slot, tile, None, dk, dv, smem, stats, qk_scale, LAYOUTS, CFG,
                                                loads, dq_desc, dq_r_desc, False, False)
                else:
                    for step in range(lo, hi):
                        _, dk, dv = _mma_step(step, slot, tile, None, dk, dv, smem, stats, qk_scale, LAYOUTS, CFG,
                                                loads, dq_desc, dq_r_desc, False)
        else:
            for step in range(tile.steps):
                _, dk, dv = _mma_step(step, slot, tile, None, dk, dv, smem, stats, qk_scale, LAYOUTS, CFG, loads,
                                        dq_desc, dq_r_desc, False)
    if not SPECIALIZED:
        tma.store_wait(pendings=0)
    store_dk_dv(smem, stores, tile, dk, dv, CFG)
    return slot + tile.steps
