"""ws_two_pass's dQ kernel (Gluon, sm90): the atomic-free twin of ws's dQ. One program per (query block, batch,
query head): Q, dO, LSE and delta stay resident, a 1-warp partition streams K and V blocks through a STAGES-deep
TMA ring, and the compute warps (240 registers) run per key block

    S  = Q K^T      [BM, D] @ [D, BN] -> [BM, BN]    (async wgmma, both operands in shared memory)
    dP = dO V^T     [BM, D] @ [D, BN] -> [BM, BN]
    P  = exp2(S * scale * log2 e - lse),  dS = P * (dP - delta)
    dQ += dS K      [BM, BN] (registers) @ [BN, D] -> [BM, D]

dQ stays in registers and is written once (x scale) through Q's shared tile by a TMA store (a tail block by
masked stores): no fp32 accumulator, no reduce-adds, no conversion pass, bitwise reproducible. Under causal
masking a program walks the key blocks up to its diagonal, and programs are numbered last query block first
(the longest walks start first). Tensors are read as ws reads them: TMA views [B * N, H, D] of dense [B, N, H, D]
with tiles of tile_dim(D) columns (zeros past D). Packed documents (VARLEN): one program per (document, query block)
pair and head, heaviest first.
"""
import functools
from typing import NamedTuple

import triton

from kernels.common import LOG2E, cdiv
from kernels.gluon.compat import (cta_barrier, fence_async_shared, gl, gluon, mbarrier, tma, tma_load, tma_store,
                                  warpgroup_mma_wait)
from kernels.gluon.tiles import (WsDocs, WsScales, as_box, chunk_zeros, document_pair, head_dim_chunks, issue_products,
                                 mma_chunks, probabilities, rows_descriptor, store_chunks, store_rows, tile_dim,
                                 wait_chunks)
from kernels.launch import launch


class DqTensors(NamedTuple):  # what the kernel reads and writes by pointer
    lse: object  # [B, H, Nq] fp32, base 2 (packed: [1, H, total_q])
    delta: object  # like lse
    dq: object  # [B, Nq, H, D] dense (tails' masked stores)


class DqSizes(NamedTuple):  # the problem's sizes (VARLEN: seq_q, seq_k the packed totals)
    seq_q: int
    seq_k: int
    heads: int
    kv_heads: int


class DqLayouts(NamedTuple):  # the kernel's register and shared layouts (`dq_layouts`)
    s: object  # S / dP [BM, BN]
    dq: object  # dQ [BM, D_MAIN]
    dq_r: object  # dQ [BM, D_REST] (the second head-dim chunk; dq with one chunk)
    q_smem: object  # Q, dO [BM, tile D]
    kv_smem: object  # K, V [BN, tile D]


@gluon.jit
def _ws_dq_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, tensors, docs, sizes, scales, DIM: gl.constexpr,
                  LAYOUTS: gl.constexpr, D_MAIN: gl.constexpr,
                  D_REST: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, MASKED: gl.constexpr,
                  VARLEN: gl.constexpr):
    """Grid (cdiv(Nq, BM) * B * H,) (VARLEN: (pairs * H,), PAIRS [pairs, 2] = (document, query block); docs:
    kernels.gluon.tiles.WsDocs). The TMA views (top-level arguments, as _ws_backward_kernel's): q/do/dq: [B * Nq, H, D] boxes [BM, 1, tile D]; k/v: [B * Nk, Hkv, D]
    boxes [BN, 1, tile D]. tensors (DqTensors): LSE (base 2), DELTA: [B, H, Nq] fp32 (packed: [1, H, total_q]); DQ:
    dense [B, Nq, H, D] (tails' masked stores). sizes: DqSizes; scales: kernels.gluon.tiles.WsScales; LAYOUTS:
    DqLayouts (`dq_layouts`); D_MAIN, D_REST: the head-dim chunks (`head_dim_chunks`)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[2]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    rows = _program_rows(sizes, docs, BLOCK_M, BLOCK_N, CAUSAL, VARLEN)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], LAYOUTS.q_smem)
    do_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], LAYOUTS.q_smem)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # K, V of a stage landed
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # a stage's MMAs are done
    mbarrier.init(q_ready, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    tiles = (q_smem, do_smem, k_smem, v_smem, q_ready, ready, empty)
    gl.warp_specialize([
        (_dq_compute, (tiles, rows, dq_desc, tensors, scales, DIM, LAYOUTS, D_MAIN, D_REST, STAGES, CAUSAL,
                       MASKED)),
        (_dq_loads, (q_desc, k_desc, v_desc, do_desc, tiles, rows, STAGES)),
    ], [1], [24])


@gluon.jit
def _program_rows(sizes, docs, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
                  VARLEN: gl.constexpr):
    """(i_b, i_h, i_hk, seq_q, seq_k, heads, kv_heads, start_m, key_blocks, bases) of this program: query blocks last
    first, then (batch, head) pairs (VARLEN: program = pair * H + head, PAIRS[pair] = (document, query block));
    key_blocks: how many key blocks its queries see (causal: up to the diagonal); bases = (q_row0, k_row0,
    stats_row0): its batch's (document's) first rows in the q / k views and its head's LSE / delta row. sizes:
    (seq_q, seq_k, heads, kv_heads); docs: (CU_Q, CU_K, PAIRS)."""
    seq_q, seq_k, heads, kv_heads = sizes
    CU_Q, CU_K, PAIRS = docs
    pid = gl.program_id(0)
    if VARLEN:
        i_h = pid % heads
        i_b, i_m, q_row0, k_row0, doc_q, doc_k = document_pair(pid // heads, PAIRS, CU_Q, CU_K)
        bases = (q_row0, k_row0, i_h * seq_q + q_row0)  # LSE [1, H, total_q]
        seq_q = doc_q
        seq_k = doc_k
    else:
        query_blocks = gl.cdiv(seq_q, BLOCK_M)
        i_m = query_blocks - 1 - pid // (gl.num_programs(0) // query_blocks)
        i_bh = pid % (gl.num_programs(0) // query_blocks)
        i_b = i_bh // heads
        i_h = i_bh % heads
        bases = (i_b * seq_q, i_b * seq_k, i_bh * seq_q)
    i_hk = i_h // (heads // kv_heads)
    start_m = i_m * BLOCK_M
    if CAUSAL:  # bottom-right: query i sees key j iff j <= i + Nk - Nq
        n_end = gl.minimum(gl.maximum(start_m + BLOCK_M + seq_k - seq_q, 0), seq_k)
    else:
        n_end = seq_k
    return (i_b, i_h, i_hk, seq_q, seq_k, heads, kv_heads, start_m, gl.cdiv(n_end, BLOCK_N), bases)


@gluon.jit
def _dq_loads(q_desc, k_desc, v_desc, do_desc, tiles, rows, STAGES: gl.constexpr):
    """One warp: Q and dO once, then each key block's K and V as soon as the compute warps freed its stage."""
    q_smem, do_smem, k_smem, v_smem, q_ready, ready, empty = tiles
    i_b, i_h, i_hk, seq_q, seq_k, heads, kv_heads, start_m, key_blocks, bases = rows
    q_row0, k_row0, stats_row0 = bases
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes)
    tma_load(q_desc, [q_row0 + start_m, i_h, 0], q_ready, as_box(q_smem))
    tma_load(do_desc, [q_row0 + start_m, i_h, 0], q_ready, as_box(do_smem))
    for j in range(key_blocks):
        stage = j % STAGES
        mbarrier.wait(empty.index(stage), ((j // STAGES) & 1) ^ 1)  # passes at once on the first lap
        mbarrier.expect(ready.index(stage), 2 * k_desc.block_type.nbytes)
        tma_load(k_desc, [k_row0 + j * BLOCK_N, i_hk, 0], ready.index(stage), as_box(k_smem.index(stage)))
        tma_load(v_desc, [k_row0 + j * BLOCK_N, i_hk, 0], ready.index(stage), as_box(v_smem.index(stage)))


@gluon.jit
def _dq_compute(tiles, rows, dq_desc, tensors, scales, DIM: gl.constexpr, LAYOUTS: gl.constexpr, D_MAIN: gl.constexpr,
                D_REST: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, MASKED: gl.constexpr):
    """The compute warps: per key block S, dP, then dS and dQ += dS K; at the end dQ (x scale) out. tensors: (LSE,
    DELTA, DQ); scales: (qk_scale, sm_scale); D_MAIN, D_REST: the head-dim chunks of the products
    (kernels.gluon.tiles.head_dim_chunks)."""
    q_smem, do_smem, k_smem, v_smem, q_ready, ready, empty = tiles
    LSE, DELTA, DQ = tensors
    qk_scale, sm_scale = scales
    S_LAYOUT: gl.constexpr = LAYOUTS.s
    DQ_LAYOUT: gl.constexpr = LAYOUTS.dq
    DQ_LAYOUT_R: gl.constexpr = LAYOUTS.dq_r
    i_b, i_h, i_hk, seq_q, seq_k, heads, kv_heads, start_m, key_blocks, bases = rows
    q_row0, k_row0, stats_row0 = bases
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    dtype: gl.constexpr = q_smem.dtype
    CHUNKS: gl.constexpr = 2 if D_REST > 0 else 1  # wgmma groups per product
    DS_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=DQ_LAYOUT, k_width=2)
    DS_OPERAND_R: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=DQ_LAYOUT_R, k_width=2)
    o_m = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, S_LAYOUT))  # query of each S row
    row_stats = stats_row0 + o_m
    lse = gl.load(LSE + row_stats, mask=o_m < seq_q, other=float("inf"))  # [BM]; rows past Nq: P = 0
    delta = gl.load(DELTA + row_stats, mask=o_m < seq_q, other=0.)  # [BM]
    dq = chunk_zeros(BLOCK_M, DQ_LAYOUT, DQ_LAYOUT_R, D_MAIN, D_REST)  # [BM, D] as head-dim chunks
    mbarrier.wait(q_ready, 0)
    for j in range(key_blocks):
        stage = j % STAGES
        mbarrier.wait(ready.index(stage), (j // STAGES) & 1)
        k_tile = k_smem.index(stage)
        s, dp = issue_products(q_smem, k_tile, do_smem, v_smem.index(stage), S_LAYOUT, D_MAIN,
                                D_REST)  # [BM, BN] each
        s = warpgroup_mma_wait(num_outstanding=CHUNKS, deps=(s,))
        p, _ = probabilities(s, lse, o_m, j * BLOCK_N, start_m, seq_q, seq_k, qk_scale, False, CAUSAL, -1, -1, 0.0,
                              MASKED)  # no window, no softcap (ws_two_pass lists no modifiers)
        dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp,))
        ds = (p * (dp - gl.expand_dims(delta, 1))).to(dtype)  # [BM, BN]
        dq = mma_chunks(gl.convert_layout(ds, DS_OPERAND), gl.convert_layout(ds, DS_OPERAND_R), k_tile, dq, D_MAIN,
                         D_REST)  # [BM, BN] @ [BN, D]
        dq, _ = wait_chunks(0, dq, dq, D_REST)
        mbarrier.arrive(empty.index(stage), count=1)  # the stage's MMAs are done (the arrive: a barrier first)
    if start_m + BLOCK_M <= seq_q:  # a whole query block: out through Q's shared tile by TMA
        cta_barrier()  # every warpgroup's wgmmas that read Q are done
        store_chunks(q_smem, dq, sm_scale, D_MAIN, D_REST)
        fence_async_shared()
        cta_barrier()
        tma_store(dq_desc, [q_row0 + start_m, i_h, 0], as_box(q_smem))  # columns past DIM: outside the view, dropped
        tma.store_wait(pendings=0)
    else:  # a tail: its rows past Nq are the next batch's (document's) in the view
        store_rows(DQ, dq, sm_scale, q_row0 + start_m, q_row0 + seq_q, heads, i_h, DIM, D_MAIN, D_REST)


@functools.cache  # host time of a launch: made once per tile config
def dq_layouts(block_m: int, block_n: int, head_dim: int, num_warps: int, dtype) -> DqLayouts:
    """S / dP [BM, BN] and dQ [BM, D] (each head-dim chunk: head_dim_chunks) split by 16-row slices over the warps
    (BM = 16 x num_warps x k); the shared layouts of the Q / dO and K / V tiles (tile_dim(D) columns)."""
    from kernels.gluon.tiles import GL_DTYPES
    d_main, d_rest = head_dim_chunks(head_dim)
    tile = tile_dim(head_dim)

    def by_rows(n_cols):
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, n_cols, 16])

    return DqLayouts(s=by_rows(block_n), dq=by_rows(d_main), dq_r=by_rows(d_rest or d_main),
                     q_smem=gl.NVMMASharedLayout.get_default_for([block_m, tile], GL_DTYPES[dtype]),
                     kv_smem=gl.NVMMASharedLayout.get_default_for([block_n, tile], GL_DTYPES[dtype]))


def ws_dq(q, k, v, do, lse, delta, dq, *, causal: bool, scale: float, BLOCK_M: int, BLOCK_N: int, num_warps: int,
          num_stages: int, varlen=None) -> None:
    """dq [B, Nq, H, D] (dense, q's dtype) = the attention gradient of q; q, do [B, Nq, H, D], k, v [B, Nk, Hkv, D]
    dense fp16 / bf16; lse (base 2), delta [B, H, Nq] fp32. varlen: a kernels.varlen.Packing (q ... [1, total, H, D],
    lse / delta [1, H, total_q])."""
    batch, seq_q, heads, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    if seq_q == 0:
        return
    masked = causal or varlen is not None or seq_q % BLOCK_M != 0 or seq_k % BLOCK_N != 0
    cu_q = cu_k = pairs = lse  # unused unless varlen
    grid = (cdiv(seq_q, BLOCK_M) * batch * heads,)
    if varlen is not None:  # (document, query block) pairs, the most keys first
        pairs = varlen.block_indices(block_q=BLOCK_M, heaviest_first=True, causal=causal)
        cu_q, cu_k = varlen.cu_seqlens_q, varlen.cu_seqlens_k
        grid = (pairs.shape[0] * heads,)
        if grid[0] == 0:
            return
    d_main, d_rest = head_dim_chunks(head_dim)
    launch(_ws_dq_kernel, grid,
        q_desc=rows_descriptor(q, BLOCK_M), k_desc=rows_descriptor(k, BLOCK_N), v_desc=rows_descriptor(v, BLOCK_N),
        do_desc=rows_descriptor(do, BLOCK_M), dq_desc=rows_descriptor(dq, BLOCK_M),
        tensors=DqTensors(lse=lse, delta=delta, dq=dq), docs=WsDocs(cu_q=cu_q, cu_k=cu_k, pairs=pairs),
        sizes=DqSizes(seq_q=seq_q, seq_k=seq_k, heads=heads, kv_heads=kv_heads),
        scales=WsScales(qk_scale=scale * LOG2E, sm_scale=scale), DIM=head_dim,
        LAYOUTS=dq_layouts(BLOCK_M, BLOCK_N, head_dim, num_warps, q.dtype), D_MAIN=d_main, D_REST=d_rest,
        STAGES=num_stages, CAUSAL=causal, MASKED=masked, VARLEN=varlen is not None, num_warps=num_warps)


def ws_two_pass_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float, dkdv_blocks: dict,
                         dq_blocks: dict, varlen=None):
    """(dq, dk, dv) without atomics: ws's main kernel without dQ (`ws_dkdv`, dkdv_blocks: its tile fields), then
    `ws_dq` (dq_blocks: BLOCK_M, BLOCK_N, num_warps, num_stages). q, do [B, Nq, H, D], k, v [B, Nk, Hkv, D];
    varlen: a kernels.varlen.Packing (B = 1, packed documents)."""
    import torch

    from kernels.gluon.tiles import dense_bnhd
    from kernels.gluon.ws import ws_dkdv
    q, k, v, do = (t if dense_bnhd(t) else t.contiguous() for t in (q, k, v, do))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ws_dkdv(q, k, v, do, lse, delta, dk, dv, None, causal=causal, scale=scale, varlen=varlen, **dkdv_blocks)
    ws_dq(q, k, v, do, lse, delta, dq, causal=causal, scale=scale, varlen=varlen, **dq_blocks)
    return dq, dk, dv
