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
pair and head, heaviest first. V and dO may have a head dim Dv of their own (issue 47): dP = dO V^T reduces over
Dv's chunks (`WsConfig.DV_MAIN`, `DV_REST`), their tiles are tile_dim(Dv) wide.
"""
import functools
from typing import NamedTuple


from kernels.common import LOG2E, cdiv
from kernels.gluon.compat import gl, gluon, mbarrier, tma_load, warpgroup_mma_wait
from kernels.gluon.config import make_config
from kernels.gluon.epilogue import store_dq_out
from kernels.gluon.ring import dq_smem
from kernels.gluon.scheduler import dq_program
from kernels.gluon.tiles import (WsDocs, WsScales, as_box, chunk_zeros, head_dim_chunks, issue_product, mma_chunks,
                                 probabilities, rebase, rows_descriptor, template, tile_dim, unmasked_key_blocks,
                                 wait_chunks)
from kernels.launch import launch, memo


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
    q_smem: object  # Q [BM, tile D]
    kv_smem: object  # K [BN, tile D]
    do_smem: object  # dO [BM, tile Dv] (Dv: V's head dim, issue 47; q_smem's when Dv = D)
    v_smem: object  # V [BN, tile Dv]


@gluon.jit
def _ws_dq_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, tensors, docs, sizes, scales, LAYOUTS: gl.constexpr,
                  CFG: gl.constexpr):
    """Grid (cdiv(Nq, BM) * B * H,) (VARLEN: (pairs * H,), PAIRS [pairs, 2] = (document, query block); docs:
    kernels.gluon.tiles.WsDocs). The TMA views (top-level arguments, as _ws_backward_kernel's): q/do/dq: [B * Nq, H,
    D] boxes [BM, 1, tile D]; k/v: [B * Nk, Hkv, D] boxes [BN, 1, tile D]. tensors (DqTensors): LSE (base 2), DELTA:
    [B, H, Nq] fp32 (packed: [1, H, total_q]); DQ: dense [B, Nq, H, D] (tails' masked stores). sizes: DqSizes;
    scales: kernels.gluon.tiles.WsScales; LAYOUTS: DqLayouts (`dq_layouts`); CFG: kernels.gluon.config.WsConfig
    (DIM, D_MAIN, D_REST, STAGES, CAUSAL, MASKED, VARLEN are read). The parts: the scheduler's `dq_program`, the
    shared tiles and K / V ring of kernels.gluon.ring.DqSmem, a load role and a compute role, the epilogue's
    `store_dq_out`."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    prog = dq_program(sizes, docs, BLOCK_M, BLOCK_N, CFG.CAUSAL, CFG.VARLEN)
    smem = dq_smem(q_desc, k_desc, v_desc, LAYOUTS, CFG.STAGES)
    gl.warp_specialize([
        (_dq_compute, (smem, prog, dq_desc, tensors, scales, LAYOUTS, CFG)),
        (_dq_loads, (q_desc, k_desc, v_desc, do_desc, smem, prog)),
    ], [1], [24])


@gluon.jit
def _dq_loads(q_desc, k_desc, v_desc, do_desc, smem, prog):
    """One warp: Q and dO once, then each key block's K and V as soon as the compute warps freed its stage."""
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    mbarrier.expect(smem.q_ready, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    tma_load(q_desc, [prog.q_row0 + prog.start_m, prog.i_h, 0], smem.q_ready, as_box(smem.q))
    tma_load(do_desc, [prog.q_row0 + prog.start_m, prog.i_h, 0], smem.q_ready, as_box(smem.do_))
    for j in range(prog.key_blocks):
        stage = smem.ring.stage(j)
        smem.ring.wait_free(j)  # passes at once on the first lap
        mbarrier.expect(smem.ring.filled(j), k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma_load(k_desc, [prog.k_row0 + j * BLOCK_N, prog.i_hk, 0], smem.ring.filled(j), as_box(smem.k.index(stage)))
        tma_load(v_desc, [prog.k_row0 + j * BLOCK_N, prog.i_hk, 0], smem.ring.filled(j), as_box(smem.v.index(stage)))


@gluon.jit
def _dq_compute(smem, prog, dq_desc, tensors, scales, LAYOUTS: gl.constexpr, CFG: gl.constexpr):
    """The compute warps: per key block S, dP, then dS and dQ += dS K; at the end dQ (x scale) out. tensors: (LSE,
    DELTA, DQ); scales: (qk_scale, sm_scale); CFG.D_MAIN, CFG.D_REST: the head-dim chunks of the products
    (kernels.gluon.tiles.head_dim_chunks)."""
    LSE, DELTA, DQ = tensors
    qk_scale, sm_scale = scales
    S_LAYOUT: gl.constexpr = LAYOUTS.s
    DQ_LAYOUT: gl.constexpr = LAYOUTS.dq
    DQ_LAYOUT_R: gl.constexpr = LAYOUTS.dq_r
    D_MAIN: gl.constexpr = CFG.D_MAIN
    D_REST: gl.constexpr = CFG.D_REST
    BLOCK_M: gl.constexpr = smem.q.shape[0]
    BLOCK_N: gl.constexpr = smem.k.shape[1]
    o_m = prog.start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, S_LAYOUT))  # query of each S row
    row_stats = prog.stats_row0 + o_m
    lse = gl.load(LSE + row_stats, mask=o_m < prog.seq_q, other=float("inf"))  # [BM]; rows past Nq: P = 0
    delta = gl.load(DELTA + row_stats, mask=o_m < prog.seq_q, other=0.)  # [BM]
    dq = chunk_zeros(BLOCK_M, DQ_LAYOUT, DQ_LAYOUT_R, D_MAIN, D_REST)  # [BM, D] as head-dim chunks
    mbarrier.wait(smem.q_ready, 0)
    clear = 0
    if CFG.SPLIT_MASKED:  # the key blocks no row needs masked in a loop compiled without the mask, then the rest
        clear = unmasked_key_blocks(prog.start_m, prog.seq_q, prog.seq_k, prog.key_blocks, BLOCK_N, CFG.CAUSAL)
        if prog.start_m + BLOCK_M > prog.seq_q:  # probabilities also masks queries past Nq: a tail block has none
            clear = 0
        for j in range(0, clear):
            dq = _dq_key_block(j, dq, smem, prog, lse, delta, o_m, qk_scale, LAYOUTS, CFG, False)
    for j in range(clear, prog.key_blocks):
        dq = _dq_key_block(j, dq, smem, prog, lse, delta, o_m, qk_scale, LAYOUTS, CFG, True)
    store_dq_out(dq_desc, smem, prog, DQ, dq, sm_scale, CFG)


@gluon.jit
def _dq_key_block(j, dq, smem, prog, lse, delta, o_m, qk_scale, LAYOUTS: gl.constexpr, CFG: gl.constexpr,
                  MASK: gl.constexpr):
    """Key block j: S, dP, then dS and dQ += dS K, its stage handed back -> dq. MASK=False: a block no row needs
    masked (CFG.SPLIT_MASKED), compiled without the mask."""
    S_LAYOUT: gl.constexpr = LAYOUTS.s
    DQ_LAYOUT: gl.constexpr = LAYOUTS.dq
    DQ_LAYOUT_R: gl.constexpr = LAYOUTS.dq_r
    D_MAIN: gl.constexpr = CFG.D_MAIN
    D_REST: gl.constexpr = CFG.D_REST
    BLOCK_N: gl.constexpr = smem.k.shape[1]
    dtype: gl.constexpr = smem.q.dtype
    CHUNKS_V: gl.constexpr = 2 if CFG.DV_REST > 0 else 1  # wgmma groups of dP = dO V^T (chunks of Dv)
    DS_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=DQ_LAYOUT, k_width=2)
    DS_OPERAND_R: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=DQ_LAYOUT_R, k_width=2)
    stage = smem.ring.stage(j)
    smem.ring.wait_full(j)
    k_tile = smem.k.index(stage)
    v_tile = smem.v.index(stage)  # before S is issued, as the code it replaced did (the same PTX at Dv = D)
    s = issue_product(smem.q, k_tile, S_LAYOUT, D_MAIN, D_REST)  # [BM, D] @ [D, BN]
    dp = issue_product(smem.do_, v_tile, S_LAYOUT, CFG.DV_MAIN, CFG.DV_REST)  # [BM, Dv] @ [Dv, BN]
    s = warpgroup_mma_wait(num_outstanding=CHUNKS_V, deps=(s,))  # dP's groups still in flight
    p, _ = probabilities(s, lse, o_m, j * BLOCK_N, prog.start_m, prog.seq_q, prog.seq_k, qk_scale, False,
                         CFG.CAUSAL, -1, -1, 0.0, CFG.MASKED and MASK)  # no window, no softcap (ws_two_pass: none)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp,))
    ds = (p * (dp - gl.expand_dims(delta, 1))).to(dtype)  # [BM, BN]
    dq = mma_chunks(gl.convert_layout(ds, DS_OPERAND), gl.convert_layout(ds, DS_OPERAND_R), k_tile, dq, D_MAIN,
                    D_REST)  # [BM, BN] @ [BN, D]
    dq, _ = wait_chunks(0, dq, dq, D_REST)
    smem.ring.release(j)  # the stage's MMAs are done (the arrive: a barrier first)
    return dq


@functools.cache  # host time of a launch: made once per tile config
def dq_layouts(block_m: int, block_n: int, head_dim: int, num_warps: int, dtype, split: bool = False,
               head_dim_v: int | None = None) -> DqLayouts:
    """S / dP [BM, BN] and dQ [BM, D] (each head-dim chunk: head_dim_chunks) split by 16-row slices over the warps
    (BM = 16 x num_warps x k); the shared layouts of the Q / dO and K / V tiles (tile_dim(D) columns; dO, V:
    tile_dim(head_dim_v), None = head_dim). split: head_dim_split's chunks."""
    from kernels.gluon.tiles import GL_DTYPES
    d_main, d_rest = head_dim_chunks(head_dim, split)
    tile = tile_dim(head_dim)
    tile_v = tile_dim(head_dim_v or head_dim)

    def by_rows(n_cols):
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, n_cols, 16])

    return DqLayouts(s=by_rows(block_n), dq=by_rows(d_main), dq_r=by_rows(d_rest or d_main),
                     q_smem=gl.NVMMASharedLayout.get_default_for([block_m, tile], GL_DTYPES[dtype]),
                     kv_smem=gl.NVMMASharedLayout.get_default_for([block_n, tile], GL_DTYPES[dtype]),
                     do_smem=gl.NVMMASharedLayout.get_default_for([block_m, tile_v], GL_DTYPES[dtype]),
                     v_smem=gl.NVMMASharedLayout.get_default_for([block_n, tile_v], GL_DTYPES[dtype]))


def ws_dq(q, k, v, do, lse, delta, dq, *, causal: bool, scale: float, BLOCK_M: int, BLOCK_N: int, num_warps: int,
          num_stages: int, varlen=None, head_dim_split: bool = False, split_masked: bool = False) -> None:
    """dq [B, Nq, H, D] (dense, q's dtype) = the attention gradient of q; q, do [B, Nq, H, D], k, v [B, Nk, Hkv, D]
    dense fp16 / bf16; lse (base 2), delta [B, H, Nq] fp32. varlen: a kernels.varlen.Packing (q ... [1, total, H, D],
    lse / delta [1, H, total_q]). head_dim_split: D96's products in 64 + 32 head-dim chunks (`head_dim_chunks`).
    split_masked: the key blocks no row of a query block needs masked in a loop compiled without the mask."""
    slot = memo("ws_dq") if varlen is None else None  # a plan's phase: what its key fixes, worked out once
    if slot:
        if slot["grid"] is not None:
            views = slot["views"]
            launch(_ws_dq_kernel, slot["grid"], q_desc=rebase(views[0], q), k_desc=rebase(views[1], k),
                   v_desc=rebase(views[2], v), do_desc=rebase(views[3], do), dq_desc=rebase(views[4], dq),
                   tensors=DqTensors(lse, delta, dq), docs=WsDocs(lse, lse, lse),
                   scales=WsScales(scale * LOG2E, scale), **slot["fixed"])
        return
    batch, seq_q, heads, head_dim = q.shape
    seq_k, kv_heads, head_dim_v = k.shape[1], k.shape[2], v.shape[-1]
    if seq_q == 0:
        if slot is not None:
            slot["grid"] = None
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
    d_main, d_rest = head_dim_chunks(head_dim, head_dim_split)
    dv_main, dv_rest = head_dim_chunks(head_dim_v, head_dim_split)
    views = (rows_descriptor(q, BLOCK_M), rows_descriptor(k, BLOCK_N), rows_descriptor(v, BLOCK_N),
             rows_descriptor(do, BLOCK_M), rows_descriptor(dq, BLOCK_M))
    fixed = dict(sizes=DqSizes(seq_q=seq_q, seq_k=seq_k, heads=heads, kv_heads=kv_heads),
                 LAYOUTS=dq_layouts(BLOCK_M, BLOCK_N, head_dim, num_warps, q.dtype, head_dim_split, head_dim_v),
                 CFG=make_config(head_dim=head_dim, d_main=d_main, d_rest=d_rest, stages=num_stages, causal=causal,
                                 masked=masked, swap_ab=False, varlen=varlen is not None, head_dim_v=head_dim_v,
                                 dv_main=dv_main, dv_rest=dv_rest, split_masked=split_masked),
                 num_warps=num_warps)
    if slot is not None:  # dense: the docs are lse (unused)
        slot.update(grid=grid, views=tuple(template(desc) for desc in views), fixed=fixed)
    launch(_ws_dq_kernel, grid, q_desc=views[0], k_desc=views[1], v_desc=views[2], do_desc=views[3], dq_desc=views[4],
           tensors=DqTensors(lse=lse, delta=delta, dq=dq), docs=WsDocs(cu_q=cu_q, cu_k=cu_k, pairs=pairs),
           scales=WsScales(qk_scale=scale * LOG2E, sm_scale=scale), **fixed)


def ws_two_pass_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float, dkdv_blocks: dict,
                         dq_blocks: dict, varlen=None):
    """(dq, dk, dv) without atomics: ws's main kernel without dQ (`ws_dkdv`, dkdv_blocks: its tile fields), then
    `ws_dq` (dq_blocks: BLOCK_M, BLOCK_N, num_warps, num_stages; dkdv_blocks' head_dim_split splits both
    kernels' head dim). q, do [B, Nq, H, D], k, v [B, Nk, Hkv, D]; varlen: a kernels.varlen.Packing (B = 1, packed
    documents)."""
    import torch

    from kernels.gluon.tiles import dense_bnhd
    from kernels.gluon.ws import ws_dkdv
    q, k, v, do = (t if dense_bnhd(t) else t.contiguous() for t in (q, k, v, do))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ws_dkdv(q, k, v, do, lse, delta, dk, dv, None, causal=causal, scale=scale, varlen=varlen, **dkdv_blocks)
    ws_dq(q, k, v, do, lse, delta, dq, causal=causal, scale=scale, varlen=varlen,
          head_dim_split=dkdv_blocks.get("head_dim_split", False),
          split_masked=dkdv_blocks.get("split_masked", False), **dq_blocks)
    return dq, dk, dv
