"""The Gluon forward's shared pieces (issue 42), read by both kernels: kernels/gluon/forward.py (one compute
partition) and kernels/gluon/forward_pp.py (one partition per consumer warpgroup): a program's rows, the load
warp's K/V walk, S = Q K^T's wgmma, the score modifiers (softcap), the score mask (causal, window, Nk) and the
online softmax in base 2."""
from kernels.gluon.compat import gl, gluon, mbarrier, tma_load, warpgroup_mma
from kernels.gluon.tiles import ACC_COLUMN_THREAD_BITS, LOG2E_C, as_box, document_pair, fresh_arange, gluon_tanh


@gluon.jit
def _program_rows(tile, sizes, docs, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
                  WINDOW_LEFT: gl.constexpr = -1, WINDOW_RIGHT: gl.constexpr = -1, VARLEN: gl.constexpr = False):
    """((i_h, i_hk, heads, start_m, key_blocks), (seq_q, seq_k), (q_row0, k_row0, lse_row0)) of the program (a
    persistent program's tile) numbered tile. Tiles are numbered in chunks of sizes.chunk_heads (batch, head) pairs
    (the last chunk may be short), in a
    chunk by query block, the chunk's heads fastest; causal: the last query block (the longest walk) first. One head
    per chunk (the default) runs each head's query blocks in turn, so the programs running at once share its K and V
    in L2; FwdBlocks.lpt's chunks (chunks.forward_chunk_heads) start the longest walks of several heads first.
    key_blocks: how many key blocks the block's queries see (causal: up to the bottom-right diagonal), at least 1 (a
    block that sees no key walks one fully masked block: O = 0, LSE = +inf); q_row0 / k_row0: the batch's first
    rows in the q / k views; lse_row0: the head's LSE row.
    A window (WINDOW_LEFT / WINDOW_RIGHT >= 0, FlashAttention's window_size; causal: the right edge is the diagonal)
    bounds the walk on both sides: the block's first visible key block n_lo is folded into the key view, k_row0 +
    n_lo and seq_k - n_lo, so the walk, the ring and the mask count keys from n_lo (the mask's Nk and bottom-right
    shift Nk - Nq move with it) and need no offset of their own.
    VARLEN (packed documents, q [1, total_q, H, D]): tile = pair * H + head, docs.pairs[pair] = (document, query
    block), heaviest first (kernels.varlen.Packing.block_indices); seq_q / seq_k are then the document's and the
    rows start at its cu_seqlens; the LSE is [1, H, total_q]. docs: tiles.WsDocs (placeholders when dense)."""
    seq_q, seq_k, heads, kv_heads = sizes.seq_q, sizes.seq_k, sizes.heads, sizes.kv_heads
    if VARLEN:
        i_h = tile % heads
        i_b, i_m, q_row0, k_row0, seq_q, seq_k = document_pair(tile // heads, docs.pairs, docs.cu_q, docs.cu_k)
        lse_row0 = i_h * sizes.seq_q + q_row0  # sizes.seq_q: the packed length
    else:
        batch_heads, chunk_heads = sizes.batch_heads, sizes.chunk_heads
        query_blocks = gl.cdiv(seq_q, BLOCK_M)
        chunk = tile // (chunk_heads * query_blocks)
        in_chunk = tile % (chunk_heads * query_blocks)
        heads_here = gl.minimum(chunk_heads, batch_heads - chunk * chunk_heads)  # the last chunk: short
        i_m = in_chunk // heads_here
        if CAUSAL:
            i_m = query_blocks - 1 - i_m
        i_bh = chunk * chunk_heads + in_chunk % heads_here
        i_b = i_bh // heads
        i_h = i_bh % heads
        q_row0 = i_b * seq_q
        k_row0 = i_b * seq_k
        lse_row0 = i_bh * seq_q
    i_hk = i_h // (heads // kv_heads)
    start_m = i_m * BLOCK_M
    right: gl.constexpr = 0 if CAUSAL else WINDOW_RIGHT  # -1: unbounded
    if right >= 0:  # bottom-right: query i sees key j iff j <= i + Nk - Nq + right
        n_end = gl.minimum(gl.maximum(start_m + BLOCK_M + seq_k - seq_q + right, 0), seq_k)
    else:
        n_end = seq_k
    n_lo = 0
    if WINDOW_LEFT >= 0:  # and iff j >= i + Nk - Nq - WINDOW_LEFT: the block's first row's first key, its block
        n_lo = gl.maximum(start_m + seq_k - seq_q - WINDOW_LEFT, 0) // BLOCK_N * BLOCK_N
        n_lo = gl.minimum(n_lo, gl.maximum(n_end - 1, 0) // BLOCK_N * BLOCK_N)  # a block that sees no key: one block
    key_blocks = gl.maximum(gl.cdiv(n_end - n_lo, BLOCK_N), 1)
    return (i_h, i_hk, heads, start_m, key_blocks), (seq_q, seq_k - n_lo), (q_row0, k_row0 + n_lo, lse_row0)


@gluon.jit
def _kv_loads(k_desc, v_desc, tiles, ready, empty, k_row0, i_hk, key_blocks, STAGES: gl.constexpr, first=0, base=0):
    """The load warp's walk over key blocks first .. key_blocks - 1: K_j into its stage once `k_empty` says the
    stage's S is done (every consumer's), then V_j once `v_empty` says its P V is done, each on its own `ready`
    barrier. base: the ring's blocks before this tile's (a persistent program's earlier tiles), so block j is the
    ring's block base + j."""
    k_smem, v_smem = tiles
    k_ready, v_ready = ready
    k_empty, v_empty = empty
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    for j in range(first, key_blocks):
        stage = (base + j) % STAGES
        phase = (((base + j) // STAGES) & 1) ^ 1  # passes at once on the first lap
        mbarrier.wait(k_empty.index(stage), phase)
        mbarrier.expect(k_ready.index(stage), k_desc.block_type.nbytes)
        tma_load(k_desc, [k_row0 + j * BLOCK_N, i_hk, 0], k_ready.index(stage), as_box(k_smem.index(stage)))
        mbarrier.wait(v_empty.index(stage), phase)
        mbarrier.expect(v_ready.index(stage), v_desc.block_type.nbytes)
        tma_load(v_desc, [k_row0 + j * BLOCK_N, i_hk, 0], v_ready.index(stage), as_box(v_smem.index(stage)))


@gluon.jit
def _scores(q_smem, k_smem, k_ready, k_empty, j, S_LAYOUT: gl.constexpr, STAGES: gl.constexpr):
    """Issues S_j = Q K_j^T ([BM, D] @ [D, BN] -> [BM, BN], async wgmma) once K_j has landed; j: the ring's block
    number (a persistent program counts on across its tiles)."""
    stage = j % STAGES
    mbarrier.wait(k_ready.index(stage), (j // STAGES) & 1)
    k_tile = k_smem.index(stage)
    acc_shape: gl.constexpr = [q_smem.shape[0], k_smem.shape[1]]
    acc = gl.zeros(acc_shape, gl.float32, S_LAYOUT)
    return warpgroup_mma(q_smem, k_tile.permute((1, 0)), acc, use_acc=False, is_async=True)


@gluon.jit
def _mask_scores(s, o_m, start_n, start_m, seq_q, seq_k, CAUSAL: gl.constexpr, MASKED: gl.constexpr,
                 FRESH: gl.constexpr = False, WINDOW_LEFT: gl.constexpr = -1, WINDOW_RIGHT: gl.constexpr = -1):
    """s [BM, BN] scores with keys past Nk, right of the causal diagonal or outside the window (WINDOW_LEFT /
    WINDOW_RIGHT >= 0, bottom-right aligned as the diagonal) at -inf; only a block that crosses the diagonal, a
    window edge or Nk (MASKED and this block) pays for the mask. FRESH (a persistent program's tile loop): the key
    indices built here (tiles.fresh_arange), not hoisted out of the tile loop and held, spilled, across it."""
    BLOCK_M: gl.constexpr = s.shape[0]
    BLOCK_N: gl.constexpr = s.shape[1]
    if MASKED:
        shift = seq_k - seq_q
        right: gl.constexpr = 0 if CAUSAL else WINDOW_RIGHT  # -1: unbounded
        crosses = start_n + BLOCK_N > seq_k
        if right >= 0:
            crosses = crosses or start_m + shift + right < start_n + BLOCK_N - 1
        if WINDOW_LEFT >= 0:
            crosses = crosses or start_m + BLOCK_M - 1 + shift - WINDOW_LEFT > start_n
        if crosses:
            keys = gl.expand_dims(start_n + fresh_arange(BLOCK_N, gl.SliceLayout(0, s.type.layout),
                                                         ACC_COLUMN_THREAD_BITS, FRESH), 0)
            visible = keys < seq_k
            if right >= 0:
                visible = visible & (keys <= gl.expand_dims(o_m, 1) + (shift + right))
            if WINDOW_LEFT >= 0:
                visible = visible & (keys >= gl.expand_dims(o_m, 1) + (shift - WINDOW_LEFT))
            s = gl.where(visible, s, float("-inf"))
    return s


@gluon.jit
def capped_scores(s, qk_scale, SOFTCAP: gl.constexpr):
    """(s, scale) with s * scale the scores in log2 units: SOFTCAP > 0, the raw scores s -> SOFTCAP tanh(s scale_e /
    SOFTCAP) in log2 units (kernels.common.modify_scores' convention) and scale 1; else s and qk_scale untouched
    (the scale stays folded into the softmax's one FMA). Before the mask: tanh(-inf) is not -inf."""
    if SOFTCAP > 0:
        return gluon_tanh(s * (qk_scale * (1.0 / (SOFTCAP * LOG2E_C)))) * (SOFTCAP * LOG2E_C), 1.0
    else:
        return s, qk_scale


@gluon.jit
def _online_softmax(s, m, l, o_m, start_n, start_m, seq_q, seq_k, qk_scale, CAUSAL: gl.constexpr,
                    MASKED: gl.constexpr, FRESH: gl.constexpr = False, DEFERRED: gl.constexpr = False,
                    WINDOW_LEFT: gl.constexpr = -1, WINDOW_RIGHT: gl.constexpr = -1, SOFTCAP: gl.constexpr = 0.0):
    """One block of the online softmax in base 2: s [BM, BN] raw scores, m [BM] the running max in log2 units,
    l [BM] the running sum -> (P [BM, BN] fp32, m_new, l_new, alpha = exp2(m - m_new), O's correction). Only a block
    that crosses the causal diagonal or Nk pays for the mask (keys past Nk or right of the diagonal -> -inf).
    A row with no visible key so far keeps m = -inf and P = 0 (no (-inf) - (-inf)). FRESH: _mask_scores's.
    DEFERRED: l holds per-thread partial sums (add_row_sums). WINDOW_*: _mask_scores's; SOFTCAP: capped_scores'."""
    s, qk_scale = capped_scores(s, qk_scale, SOFTCAP)
    s = _mask_scores(s, o_m, start_n, start_m, seq_q, seq_k, CAUSAL, MASKED, FRESH, WINDOW_LEFT, WINDOW_RIGHT)
    m_new = gl.maximum(m, gl.max(s, 1) * qk_scale)  # qk_scale > 0: max commutes with the scale
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_use, 1))  # one FMA and one exp2 per score
    alpha = gl.exp2(m - m_use)
    return p, m_new, add_row_sums(l, p, alpha, DEFERRED), alpha


@gluon.jit
def row_sum_partials(p):
    """P [BM, BN] (a wgmma accumulator's layout) -> [BM, 8]: each row's sum over the column groups col // 8, which a
    thread holds in its own registers (a column is 8 j + 2 (lane % 4) + e), so no lane exchange; the 8 partials of
    a row lie in the 4 lanes of its quad, 2 each."""
    return gl.sum(gl.reshape(p, [p.shape[0], p.shape[1] // 8, 8]), 1)


@gluon.jit
def add_row_sums(l, p, alpha, DEFERRED: gl.constexpr):
    """The online softmax's l * alpha + P's row sums. DEFERRED (FA3 / FA4's softmax): l is [BM, 8] of per-thread
    partials (row_sum_partials) and the sum across a row's lanes waits for the epilogue (finish_row_sums), which
    saves the per-block shuffles; else l is [BM], reduced every block."""
    if DEFERRED:
        part = row_sum_partials(p)
        return l * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, part.type.layout)), 1) + part
    else:
        return l * alpha + gl.sum(p, 1)


@gluon.jit
def zero_row_sums(S_LAYOUT: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, DEFERRED: gl.constexpr):
    """l's first value: [BM] zeros in S's row layout, or DEFERRED [BM, 8] in row_sum_partials' layout."""
    if DEFERRED:
        return row_sum_partials(gl.zeros([BM, BN], gl.float32, S_LAYOUT))
    else:
        return gl.zeros([BM], gl.float32, gl.SliceLayout(1, S_LAYOUT))


@gluon.jit
def finish_row_sums(l, S_LAYOUT: gl.constexpr, DEFERRED: gl.constexpr):
    """l as [BM] in S's row layout: DEFERRED, the partials' one reduction across each row's quad."""
    if DEFERRED:
        return gl.convert_layout(gl.sum(l, 1), gl.SliceLayout(1, S_LAYOUT))
    else:
        return l
