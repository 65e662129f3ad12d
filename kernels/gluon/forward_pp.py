"""The Gluon forward with one partition per consumer warpgroup (issue 42; FwdBlocks.consumers > 0): FA3's sm90
forward structure, beside kernels/gluon/forward.py's single compute partition. One program per (query block of
64 * CONSUMERS rows, batch, query head):

    consumer 0 (the default partition, 4 warps)   64 query rows each: S = Q_c K^T, the online softmax in base 2,
    consumers 1.. (4-warp workers, CONSUMER_REGS)   O += P V with P as the register A operand; each has its own Q tile
    a 1-warp load partition (24 registers)         Q_c per consumer, then K and V per key block into the ring; a
                                                   stage is free once every consumer has arrived (count CONSUMERS)

Switches (FwdCfg, from FwdBlocks): OVERLAP (intra-warpgroup overlap, FA3 §3.2: S_j issued before P_{j-1} V and
block j's softmax runs while that PV wgmma is in flight; off: S, wait, softmax, PV, wait per block), PINGPONG (FA3
§3.1: the consumers take turns issuing their wgmmas, consumer c after consumer c - 1, through one mbarrier per
consumer, so one warpgroup's softmax runs while the other's GEMMs hold the tensor cores), LAZY (FA4's conditional
rescale: a row keeps its stale max unless the new one is more than RESCALE_THRESHOLD above it, so P <= 2^8; the
O *= alpha multiply runs only when some row of the warpgroup's 64 moved its max. Exact: O, l and the LSE all use
the row's kept max) and DEFERRED_SUM (the row sum l as per-thread partials until the epilogue, FA3 / FA4's softmax:
forward_parts.add_row_sums). Every consumer
walks the program's key blocks (causal: up to the block's last row's diagonal), so the turns stay in step.

Same conventions and outputs as kernels/gluon/forward.py (base-2 LSE, +inf and O = 0 for a row without keys), and
the same window and softcap (WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP: forward_parts._program_rows, capped_scores).
"""
from typing import NamedTuple

from kernels.gluon.compat import cta_barrier, fence_async_shared, gl, gluon, mbarrier, tma, tma_load, tma_store, \
    warpgroup_mma, warpgroup_mma_wait
from kernels.gluon.epilogue import store_rows
from kernels.gluon.forward_parts import (_kv_loads, _mask_scores, _online_softmax, _program_rows, _scores, add_row_sums,
                                        capped_scores, finish_row_sums, zero_row_sums)
from kernels.gluon.scheduler import program_tiles
from kernels.gluon.tiles import ACC_ROW_THREAD_BITS, as_box, fresh_arange, unmasked_key_blocks

ROWS = gl.constexpr(64)  # query rows of one consumer warpgroup (one m64 wgmma)
CONSUMER_REGS = gl.constexpr(240)  # registers a thread of a worker consumer asks for (setmaxnreg), 2 consumers
CONSUMER_REGS_3 = gl.constexpr(160)  # 3 consumers: 3 x 160 + 24 <= 512 (64 K registers over 4 warpgroups)
LOAD_REGS = gl.constexpr(24)
RESCALE_THRESHOLD = gl.constexpr(8.0)  # LAZY: log2 units, a max may lag by 2^8 (P <= 256 fits fp16's 65504)


class FwdCfg(NamedTuple):  # the consumer kernel's compile-time switches (hashable: a constexpr)
    DIM: int  # the data's head dim (tiles have tile_dim(DIM) columns)
    STAGES: int  # K / V ring depth
    CAUSAL: bool
    MASKED: bool  # some key block crosses the causal diagonal or Nk
    CONSUMERS: int  # 1-3 consumer warpgroups of ROWS query rows each
    OVERLAP: bool  # intra-warpgroup overlap
    PINGPONG: bool  # consumers take turns issuing wgmmas
    LAZY: bool = False  # O *= alpha only when some row's max grew by more than RESCALE_THRESHOLD
    SPLIT_MASKED: bool = False  # the key blocks no row of a consumer needs masked in a loop of their own (no mask)
    PERSISTENT: bool = False  # one program per SM walks its tiles of the host's schedule (FwdSchedule)
    DEFERRED_SUM: bool = False  # l as per-thread partials [64, 8] (forward_parts.add_row_sums), one reduction at the end
    WINDOW_LEFT: int = -1  # the sliding window's edges (kernels.common.modifier_args), -1: unbounded
    WINDOW_RIGHT: int = -1
    SOFTCAP: float = 0.0  # > 0: scores -> SOFTCAP tanh(scores / SOFTCAP) (forward_parts.capped_scores)
    VARLEN: bool = False  # packed documents: one program per (document, query block) pair and head (docs)


@gluon.jit
def gluon_fwd_pp_kernel(q_desc, k_desc, v_desc, o_desc, tensors, sizes, schedule, docs, LAYOUTS: gl.constexpr,
                        CFG: gl.constexpr):
    """Grid (cdiv(Nq, 64 * CONSUMERS) * B * H,), or PERSISTENT one program per SM over schedule (FwdSchedule), or
    VARLEN (pairs * H,). q / o [B * Nq, H, D] boxes [64, 1, tile D]; k / v [B * Nk, Hkv, D] boxes [BN, 1, tile D];
    tensors: FwdTensors; sizes: FwdSizes; docs: tiles.WsDocs (VARLEN; else placeholders); LAYOUTS: FwdLayouts of one
    warpgroup's 64 rows. Every partition walks the program's tiles in turn; the ring's blocks, the turns and Q's
    phases count on across them."""
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[2]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    C: gl.constexpr = CFG.CONSUMERS  # (Triton 3.6: a record's field is a plain int until named a constexpr)
    STAGES: gl.constexpr = CFG.STAGES
    dtype: gl.constexpr = q_desc.dtype
    tiles = program_tiles(schedule, CFG.PERSISTENT)  # the program's tiles (one, its id, unless PERSISTENT)

    q_smem = gl.allocate_shared_memory(dtype, [C, ROWS, HEAD_DIM], LAYOUTS.q_smem)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    q_ready = gl.allocate_shared_memory(gl.int64, [C, 1], mbarrier.MBarrierLayout())  # consumer c's Q landed
    q_empty = gl.allocate_shared_memory(gl.int64, [C, 1], mbarrier.MBarrierLayout())  # c is done with Q (and O)
    turn = gl.allocate_shared_memory(gl.int64, [C, 1], mbarrier.MBarrierLayout())  # consumer c may issue
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # every S done
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # every P V done
    for c in gl.static_range(C):
        mbarrier.init(q_ready.index(c), count=1)
        mbarrier.init(q_empty.index(c), count=1)
        mbarrier.init(turn.index(c), count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=C)
        mbarrier.init(v_empty.index(s), count=C)
    # tiles, full, free
    ring = ((q_smem, k_smem, v_smem), (q_ready, k_ready, v_ready), (k_empty, v_empty, turn, q_empty))
    rows = (tiles, sizes, docs)  # the program's tiles and the sizes (and documents) that place each
    qk_scale = sizes.qk_scale
    if C == 1:
        gl.warp_specialize([
            (_consumer, (ring, rows, o_desc, tensors, qk_scale, LAYOUTS, CFG, 0)),
            (_load_partition, (q_desc, k_desc, v_desc, ring, rows, CFG)),
        ], [1], [LOAD_REGS])
    elif C == 2:
        gl.warp_specialize([
            (_consumer, (ring, rows, o_desc, tensors, qk_scale, LAYOUTS, CFG, 0)),
            (_consumer, (ring, rows, o_desc, tensors, qk_scale, LAYOUTS, CFG, 1)),
            (_load_partition, (q_desc, k_desc, v_desc, ring, rows, CFG)),
        ], [4, 1], [CONSUMER_REGS, LOAD_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (ring, rows, o_desc, tensors, qk_scale, LAYOUTS, CFG, 0)),
            (_consumer, (ring, rows, o_desc, tensors, qk_scale, LAYOUTS, CFG, 1)),
            (_consumer, (ring, rows, o_desc, tensors, qk_scale, LAYOUTS, CFG, 2)),
            (_load_partition, (q_desc, k_desc, v_desc, ring, rows, CFG)),
        ], [4, 4, 1], [CONSUMER_REGS_3, CONSUMER_REGS_3, LOAD_REGS])


@gluon.jit
def _load_partition(q_desc, k_desc, v_desc, ring, rows, CFG: gl.constexpr):
    """One warp, per tile: each consumer's Q (once the consumer is done with its last tile's Q and O: q_empty), then
    each key block's K (after every consumer's S of its stage) and V (after every consumer's P V of its stage), each
    on its own `ready` barrier. PERSISTENT: the tile's first K and V before its Qs, so they land while the consumers
    finish the last tile."""
    tiles, full, free = ring
    q_smem, k_smem, v_smem = tiles
    q_ready, k_ready, v_ready = full
    k_empty, v_empty, turn, q_empty = free
    program, sizes, docs = rows
    C: gl.constexpr = CFG.CONSUMERS
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    kv = ((k_smem, v_smem), (k_ready, v_ready), (k_empty, v_empty))
    if CFG.PERSISTENT:
        base = 0  # the ring's blocks of the program's earlier tiles
        for t in range(program.first, program.end):
            block, seqs, bases = _tile_rows(gl.load(program.TILES + t), sizes, docs, BLOCK_N, CFG)
            k_row0 = bases[1]
            i_hk = block[1]
            _kv_loads(k_desc, v_desc, kv[0], kv[1], kv[2], k_row0, i_hk, 1, CFG.STAGES, 0, base)
            _q_loads(q_desc, q_smem, q_ready, q_empty, block, bases, t - program.first, C)
            _kv_loads(k_desc, v_desc, kv[0], kv[1], kv[2], k_row0, i_hk, block[4], CFG.STAGES, 1, base)
            base += block[4]
    else:  # the program's one tile: its Qs, then its K and V
        block, seqs, bases = _tile_rows(program.first, sizes, docs, BLOCK_N, CFG)
        _q_loads(q_desc, q_smem, q_ready, q_empty, block, bases, 0, C)
        _kv_loads(k_desc, v_desc, kv[0], kv[1], kv[2], bases[1], block[1], block[4], CFG.STAGES)


@gluon.jit
def _tile_rows(tile, sizes, docs, BLOCK_N: gl.constexpr, CFG: gl.constexpr):
    """forward_parts._program_rows of the tile numbered `tile` under CFG's tile rows, mask and packing."""
    return _program_rows(tile, sizes, docs, ROWS * CFG.CONSUMERS, BLOCK_N, CFG.CAUSAL, CFG.WINDOW_LEFT,
                         CFG.WINDOW_RIGHT, CFG.VARLEN)


@gluon.jit
def _q_loads(q_desc, q_smem, q_ready, q_empty, block, bases, nth, C: gl.constexpr):
    """Each consumer's Q of the program's nth tile, once the consumer is done with its last tile's Q and O."""
    i_h, i_hk, heads, start_m, key_blocks = block
    for c in gl.static_range(C):
        mbarrier.wait(q_empty.index(c), (nth & 1) ^ 1)  # passes at once on the first tile
        mbarrier.expect(q_ready.index(c), q_desc.block_type.nbytes)
        tma_load(q_desc, [bases[0] + start_m + c * ROWS, i_h, 0], q_ready.index(c), as_box(q_smem.index(c)))


@gluon.jit
def _take_turn(turn, step, CFG: gl.constexpr, ME: gl.constexpr):
    """PINGPONG: wait until the consumer before this one has issued its wgmmas of `step` (consumer 0: the last
    consumer's of step - 1; its first wait passes at once)."""
    if CFG.PINGPONG:
        if ME == 0:
            mbarrier.wait(turn.index(0), (step & 1) ^ 1)
        else:
            mbarrier.wait(turn.index(ME), step & 1)


@gluon.jit
def _pass_turn(turn, CFG: gl.constexpr, ME: gl.constexpr):
    """PINGPONG: the next consumer may issue."""
    if CFG.PINGPONG:
        mbarrier.arrive(turn.index((ME + 1) % CFG.CONSUMERS), count=1)


@gluon.jit
def _issue_pv(p, v_smem, v_ready, acc, j, STAGES: gl.constexpr):
    """Issues O += P_j V_j ([64, BN] @ [BN, D], P the register A operand) once V_j has landed."""
    stage = j % STAGES
    mbarrier.wait(v_ready.index(stage), (j // STAGES) & 1)
    return warpgroup_mma(p, v_smem.index(stage), acc, is_async=True)


@gluon.jit
def _lazy_softmax(s, m, l, o_m, start_n, start_m, seq_q, seq_k, qk_scale, CAUSAL: gl.constexpr,
                  MASKED: gl.constexpr, FRESH: gl.constexpr = False, DEFERRED: gl.constexpr = False,
                  WINDOW_LEFT: gl.constexpr = -1, WINDOW_RIGHT: gl.constexpr = -1, SOFTCAP: gl.constexpr = 0.0):
    """_online_softmax with FA4's conditional rescale -> (P, m_new, l_new, alpha, moved): a row takes its new max
    only where it is more than RESCALE_THRESHOLD (log2 units) above the kept one (alpha = exp2(m - m_new) < 2^-8),
    else keeps m (alpha = 1, P <= 2^8); moved: some row of the 64 took a new max (a tile-wide max, so the branch on
    it is uniform). A row's first visible key always moves (+inf); a row with none yet stays at -inf, P = 0."""
    s, qk_scale = capped_scores(s, qk_scale, SOFTCAP)
    s = _mask_scores(s, o_m, start_n, start_m, seq_q, seq_k, CAUSAL, MASKED, FRESH, WINDOW_LEFT, WINDOW_RIGHT)
    m_cand = gl.maximum(m, gl.max(s, 1) * qk_scale)
    grow = gl.where(m_cand > m, m_cand - m, 0.0)  # no (-inf) - (-inf)
    keep = grow <= RESCALE_THRESHOLD
    m_new = gl.where(keep, m, m_cand)
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_use, 1))  # <= 2^RESCALE_THRESHOLD on a kept row
    alpha = gl.where(keep, 1.0, gl.exp2(m - m_use))
    return p, m_new, add_row_sums(l, p, alpha, DEFERRED), alpha, gl.max(grow, 0) > RESCALE_THRESHOLD


@gluon.jit
def _softmax_step(s, m, l, o_m, start_n, row0, seq_q, seq_k, qk_scale, CFG: gl.constexpr, MASK: gl.constexpr = True,
                  FRESH: gl.constexpr = False):
    """One key block's online softmax -> (P, m, l, alpha, moved); moved: LAZY's flag, else unused (0); l: [64], or
    CFG.DEFERRED_SUM [64, 8] per-thread partials.
    MASK=False: a block of the unmasked run (CFG.SPLIT_MASKED), compiled without the mask. FRESH: the mask's
    key indices built per block (_mask_scores)."""
    if CFG.LAZY:
        return _lazy_softmax(s, m, l, o_m, start_n, row0, seq_q, seq_k, qk_scale, CFG.CAUSAL, CFG.MASKED and MASK,
                             FRESH, CFG.DEFERRED_SUM, CFG.WINDOW_LEFT, CFG.WINDOW_RIGHT, CFG.SOFTCAP)
    else:
        p, m, l, alpha = _online_softmax(s, m, l, o_m, start_n, row0, seq_q, seq_k, qk_scale, CFG.CAUSAL,
                                         CFG.MASKED and MASK, FRESH, CFG.DEFERRED_SUM, CFG.WINDOW_LEFT,
                                         CFG.WINDOW_RIGHT, CFG.SOFTCAP)
        return p, m, l, alpha, 0


@gluon.jit
def _rescale(acc, alpha, moved, O_LAYOUT: gl.constexpr, LAZY: gl.constexpr):
    """O *= alpha per row ([64, D] fp32); LAZY: only when some row moved its max (the others' alpha is 1)."""
    if LAZY:
        if moved:
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT)), 1)
    else:
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT)), 1)
    return acc


@gluon.jit
def _consumer(ring, rows, o_desc, tensors, qk_scale, LAYOUTS: gl.constexpr, CFG: gl.constexpr, ME: gl.constexpr):
    """One consumer warpgroup, per tile of the program: query rows start_m + 64 ME ... of the tile's block; a
    consumer whose rows all lie past Nq (the last block's) only keeps the turns, Q's phases and the ring's arrivals
    in step. counts: (the ring's blocks, the turns, the tiles) of the program's earlier tiles."""
    program, sizes, docs = rows
    BLOCK_N: gl.constexpr = ring[0][1].shape[1]
    LAST_TURN: gl.constexpr = 1 if CFG.OVERLAP else 0  # the last P V's turn
    if CFG.PERSISTENT:
        base = 0
        for t in range(program.first, program.end):
            tile_rows = _tile_rows(gl.load(program.TILES + t), sizes, docs, BLOCK_N, CFG)
            nth = t - program.first
            counts = (base, base + nth * LAST_TURN, nth)  # a tile: its key blocks' turns and, OVERLAP, the last P V's
            _consumer_tile(ring, tile_rows, counts, o_desc, tensors, qk_scale, LAYOUTS, CFG, ME)
            base += tile_rows[0][4]
    else:  # the program's one tile, its counts constants (the kernel as before PERSISTENT)
        tile_rows = _tile_rows(program.first, sizes, docs, BLOCK_N, CFG)
        _consumer_tile(ring, tile_rows, (0, 0, 0), o_desc, tensors, qk_scale, LAYOUTS, CFG, ME)


@gluon.jit
def _consumer_tile(ring, rows, counts, o_desc, tensors, qk_scale, LAYOUTS: gl.constexpr, CFG: gl.constexpr,
                   ME: gl.constexpr):
    """One tile of a consumer: live where any of its 64 rows lies below Nq, else idle."""
    block, seqs, bases = rows
    if block[3] + ME * ROWS < seqs[0]:  # start_m + 64 ME < seq_q
        _live_consumer(ring, rows, counts, o_desc, tensors, qk_scale, LAYOUTS, CFG, ME)
    else:
        _idle_consumer(ring, block[4], counts, CFG, ME)


@gluon.jit
def _idle_consumer(ring, key_blocks, counts, CFG: gl.constexpr, ME: gl.constexpr):
    """As many turns as a live consumer takes, its wait for Q and its release, and its arrivals on each stage's
    `empty` barriers, each after that stage's load landed (so no arrival runs a lap ahead); no wgmma, no store."""
    tiles, full, free = ring
    q_ready, k_ready, v_ready = full
    k_empty, v_empty, turn, q_empty = free
    base, turns, nth = counts
    STAGES: gl.constexpr = CFG.STAGES
    mbarrier.wait(q_ready.index(ME), nth & 1)  # Q landed (unread): the loader may reuse the tile next time
    mbarrier.arrive(q_empty.index(ME), count=1)
    for j in range(key_blocks):
        _take_turn(turn, turns + j, CFG, ME)
        _pass_turn(turn, CFG, ME)
        stage = (base + j) % STAGES
        mbarrier.wait(k_ready.index(stage), ((base + j) // STAGES) & 1)
        mbarrier.arrive(k_empty.index(stage), count=1)
        mbarrier.wait(v_ready.index(stage), ((base + j) // STAGES) & 1)
        mbarrier.arrive(v_empty.index(stage), count=1)
    if CFG.OVERLAP:  # the live consumers' last turn (the last P V)
        _take_turn(turn, turns + key_blocks, CFG, ME)
        _pass_turn(turn, CFG, ME)


@gluon.jit
def _live_consumer(ring, rows, counts, o_desc, tensors, qk_scale, LAYOUTS: gl.constexpr, CFG: gl.constexpr,
                   ME: gl.constexpr):
    """Query rows start_m + 64 ME ... (some below Nq) over every key block of the tile. counts: (the ring's
    blocks, the turns, the tiles) before this tile."""
    tiles, full, free = ring
    q_smem, k_smem, v_smem = tiles
    q_ready, k_ready, v_ready = full
    k_empty, v_empty, turn, q_empty = free
    base, turns, nth = counts
    O, LSE = tensors
    block, seqs, bases = rows
    i_h, i_hk, heads, start_m, key_blocks = block
    seq_q, seq_k = seqs
    q_row0, k_row0, lse_row0 = bases
    S_LAYOUT: gl.constexpr = LAYOUTS.s
    O_LAYOUT: gl.constexpr = LAYOUTS.o
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    HEAD_DIM: gl.constexpr = q_smem.shape[2]
    STAGES: gl.constexpr = CFG.STAGES
    dtype: gl.constexpr = q_smem.dtype
    P_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    q_tile = q_smem.index(ME)
    row0 = start_m + ME * ROWS
    # query of each S row; persistent: built per tile, not hoisted out of the tile loop (tiles.fresh_arange)
    o_m = row0 + fresh_arange(ROWS, gl.SliceLayout(1, S_LAYOUT), ACC_ROW_THREAD_BITS, CFG.PERSISTENT)
    m = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, S_LAYOUT))
    l = zero_row_sums(S_LAYOUT, ROWS, BLOCK_N, CFG.DEFERRED_SUM)  # [64] or [64, 8] partials
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, O_LAYOUT)
    mbarrier.wait(q_ready.index(ME), nth & 1)

    if CFG.OVERLAP:
        _take_turn(turn, turns, CFG, ME)
        s = _scores(q_tile, k_smem, k_ready, k_empty, base, S_LAYOUT, STAGES)
        _pass_turn(turn, CFG, ME)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        mbarrier.arrive(k_empty.index(base % STAGES), count=1)
        p, m, l, alpha, moved = _softmax_step(s, m, l, o_m, 0, row0, seq_q, seq_k, qk_scale, CFG, True,
                                              CFG.PERSISTENT)
        p = gl.convert_layout(p.to(dtype), P_OPERAND)
        if CFG.SPLIT_MASKED:  # the blocks left of the diagonal without the mask, then those across it with it
            clear = gl.maximum(unmasked_key_blocks(row0, seq_q, seq_k, key_blocks, BLOCK_N, CFG.CAUSAL), 1)
            for j in range(1, clear):
                p, m, l, acc = _key_block(j, counts, p, m, l, acc, q_tile, ring, o_m, row0, seqs, qk_scale,
                                          LAYOUTS, CFG, ME, False)
            for j in range(clear, key_blocks):
                p, m, l, acc = _key_block(j, counts, p, m, l, acc, q_tile, ring, o_m, row0, seqs, qk_scale,
                                          LAYOUTS, CFG, ME, True)
        else:
            for j in range(1, key_blocks):
                p, m, l, acc = _key_block(j, counts, p, m, l, acc, q_tile, ring, o_m, row0, seqs, qk_scale,
                                          LAYOUTS, CFG, ME, True)
        _take_turn(turn, turns + key_blocks, CFG, ME)
        acc = _issue_pv(p, v_smem, v_ready, acc, base + key_blocks - 1, STAGES)
        _pass_turn(turn, CFG, ME)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(v_empty.index((base + key_blocks - 1) % STAGES), count=1)
    else:  # per block: S, wait, softmax, O *= alpha, P V, wait
        clear = 0
        if CFG.SPLIT_MASKED:  # the blocks left of the diagonal without the mask, then those across it with it
            clear = unmasked_key_blocks(row0, seq_q, seq_k, key_blocks, BLOCK_N, CFG.CAUSAL)
            for j in range(0, clear):
                _, m, l, acc = _key_block(j, counts, acc, m, l, acc, q_tile, ring, o_m, row0, seqs, qk_scale,
                                          LAYOUTS, CFG, ME, False)
        for j in range(clear, key_blocks):
            _, m, l, acc = _key_block(j, counts, acc, m, l, acc, q_tile, ring, o_m, row0, seqs, qk_scale, LAYOUTS,
                                      CFG, ME, True)

    l = finish_row_sums(l, S_LAYOUT, CFG.DEFERRED_SUM)  # [64]
    empty = l == 0.0  # rows that saw no key
    l_safe = gl.where(empty, 1.0, l)
    lse = gl.where(empty, float("inf"), m + gl.log2(l_safe))
    gl.store(LSE + lse_row0 + o_m, lse, mask=o_m < seq_q)
    out = acc * gl.expand_dims(gl.convert_layout(1.0 / l_safe, gl.SliceLayout(1, O_LAYOUT)), 1)
    if row0 + ROWS <= seq_q:  # whole rows: out through this consumer's Q tile by TMA
        cta_barrier()  # the warpgroup's wgmmas that read Q are done
        o_tile = q_tile
        if CFG.PERSISTENT:  # Q's tile at an index LLVM cannot fold (row0 >= 0): its store's shared addresses built
            # here, not hoisted out of the tile loop and held (Triton 3.6 spilled 2 of them at D64)
            o_tile = q_smem.index(ME + (row0 >> 31))
        o_tile.store(out.to(dtype))
        fence_async_shared()
        cta_barrier()
        tma_store(o_desc, [q_row0 + row0, i_h, 0], as_box(o_tile))  # columns past DIM: outside the view
        tma.store_wait(pendings=0)
    else:  # a tail: its rows past Nq are the next batch's in the view
        store_rows(O, (out,), 1.0, q_row0 + row0, q_row0 + seq_q, heads, i_h, CFG.DIM, HEAD_DIM, 0,
                   CFG.PERSISTENT)
    if CFG.PERSISTENT:  # every warp of the warpgroup past its last read of Q (wgmmas, O's TMA store) first
        cta_barrier()
    mbarrier.arrive(q_empty.index(ME), count=1)  # Q's tile is free for the program's next tile



@gluon.jit
def _key_block(j, counts, p, m, l, acc, q_tile, ring, o_m, row0, seqs, qk_scale, LAYOUTS: gl.constexpr,
               CFG: gl.constexpr, ME: gl.constexpr, MASK: gl.constexpr):
    """Key block j of a consumer's walk -> (P_j as the A operand, m, l, acc). CFG.OVERLAP (j >= 1): S_j issued
    before P_{j-1} V (p: P_{j-1}), block j's softmax while that P V runs; else S, wait, softmax, O *= alpha, P_j V,
    wait (p unread). MASK=False: a block no row needs masked (CFG.SPLIT_MASKED). counts: (the ring's blocks, the
    turns, the tiles) before this tile: block j is the ring's block base + j, its turn turns + j."""
    tiles, full, free = ring
    q_smem, k_smem, v_smem = tiles
    q_ready, k_ready, v_ready = full
    k_empty, v_empty, turn, q_empty = free
    base, turns, nth = counts
    n = base + j  # the ring's block
    seq_q, seq_k = seqs
    S_LAYOUT: gl.constexpr = LAYOUTS.s
    O_LAYOUT: gl.constexpr = LAYOUTS.o
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    STAGES: gl.constexpr = CFG.STAGES
    P_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    _take_turn(turn, turns + j, CFG, ME)
    s = _scores(q_tile, k_smem, k_ready, k_empty, n, S_LAYOUT, STAGES)
    if CFG.OVERLAP:
        acc = _issue_pv(p, v_smem, v_ready, acc, n - 1, STAGES)
        _pass_turn(turn, CFG, ME)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))  # S_j done; P V may still run
    else:
        _pass_turn(turn, CFG, ME)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    mbarrier.arrive(k_empty.index(n % STAGES), count=1)
    p, m, l, alpha, moved = _softmax_step(s, m, l, o_m, j * BLOCK_N, row0, seq_q, seq_k, qk_scale, CFG, MASK,
                                          CFG.PERSISTENT)
    p = gl.convert_layout(p.to(q_smem.dtype), P_OPERAND)
    if CFG.OVERLAP:
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(v_empty.index((n - 1) % STAGES), count=1)
        acc = _rescale(acc, alpha, moved, O_LAYOUT, CFG.LAZY)
    else:
        acc = _rescale(acc, alpha, moved, O_LAYOUT, CFG.LAZY)
        acc = _issue_pv(p, v_smem, v_ready, acc, n, STAGES)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(v_empty.index(n % STAGES), count=1)
    return p, m, l, acc
