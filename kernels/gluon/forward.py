"""The Gluon forward for sm90 (issue 42): O and the base-2 LSE in kernels/forward.py's convention, with
FlashAttention-3's forward structure. One program per (query block, batch, query head):

    a 1-warp load partition (24 registers)   Q once; per key block K and V by TMA into a STAGES-deep ring, K and V
                                             on barriers of their own (S needs only K)
    the compute warps (num_warps, 4 or 8)     each warpgroup owns BLOCK_M / (num_warps / 4) query rows; per key block
                                             S = Q K^T (async wgmma, both operands in shared memory), the online
                                             softmax in base 2 (scale * log2 e folded into one FMA), O += P V with P
                                             as the register A operand

Intra-warpgroup overlap (FA3 §3.2): block j's S = Q K_j^T is issued before block j-1's O += P V, and the softmax of
block j runs while that PV wgmma is in flight; O is rescaled by block j's correction once the PV wgmma is done.
Register reallocation: the load warp gives its registers back (24), the compute warps take the rest.

Conventions (kernels/forward.py): scores in log2 units s * scale * log2(e); LSE [B, H, Nq] fp32 = m + log2(l); a
row that sees no key (causal with Nq > Nk) gets O = 0 and LSE = +inf. Causal masking is bottom-right aligned: query
i sees key j iff j <= i + Nk - Nq. Tensors are read as the ws kernels read them (kernels/gluon/tiles.py): TMA views
[B * N, H, D] of dense [B, N, H, D], boxes [rows, 1, tile_dim(D)]; rows past a sequence's end belong to the next
batch (or are TMA zeros) and are masked (keys) or never stored (queries). A whole query block leaves through Q's
shared tile by a TMA store, a tail block by masked stores.

A sliding window and softcap (variants.problem.Modifiers, kernels.common.modifier_args' constexprs) as the stock
forward means them: the walk starts at the block's first key inside the window (forward_parts._program_rows).
Packed documents (kernels.varlen.Packing, q [1, total, H, D]): one program per (document, query block) pair and head
(forward_parts._program_rows), the LSE [1, H, total_q] as the stock forward's.
Not covered yet (refused by `forward_reason`, the caller falls back to kernels/forward.py): the forget gate, fp32,
head dims other than GLUON_FORWARD_HEAD_DIMS.
"""
import functools
from typing import NamedTuple

import torch

from kernels.common import LOG2E, cdiv, modifier_args
from kernels.gluon.chunks import forward_chunk_heads, forward_schedule, window_key_blocks
from kernels.gluon.compat import GLUON_MISSING, cta_barrier, fence_async_shared, gl, gluon, mbarrier, tma, tma_load, \
    tma_store, warpgroup_mma, warpgroup_mma_wait
from kernels.gluon.epilogue import store_rows
from kernels.gluon.forward_parts import _kv_loads, _online_softmax, _program_rows, _scores
from kernels.gluon.scheduler import sm_count
from kernels.gluon.tiles import GL_DTYPES, WsDocs, as_box, dense_bnhd, rebase, rows_descriptor, template, tile_dim
from kernels.launch import launch, memo

GLUON_FORWARD_HEAD_DIMS = (64, 96, 128, 192, 256)
GLUON_FORWARD_DTYPES = (torch.float16, torch.bfloat16)


class FwdTensors(NamedTuple):  # what the kernel writes by pointer
    o: object  # [B, Nq, H, D] dense (a tail block's masked stores)
    lse: object  # [B, H, Nq] fp32, base 2


class FwdSizes(NamedTuple):
    seq_q: int
    seq_k: int
    heads: int
    kv_heads: int
    batch_heads: int  # B * H: the programs' (tiles') pairs
    chunk_heads: int  # (batch, head) pairs per chunk of programs (FwdBlocks.lpt; else 1: `_program_rows`)
    qk_scale: float  # scale * log2(e)


class FwdSchedule(NamedTuple):  # FwdBlocks.persistent: program p walks TILES[TILE_STARTS[p]:TILE_STARTS[p + 1]]
    tiles: object  # int32, tile numbers as `_program_rows` reads them (chunks.forward_schedule); else a placeholder
    tile_starts: object  # int32 [programs + 1]


class FwdLayouts(NamedTuple):  # the kernel's register and shared layouts (`forward_layouts`)
    s: object  # S / P [BM, BN] fp32 accumulator of Q K^T
    o: object  # O [BM, tile D] fp32 accumulator of P V
    q_smem: object  # Q, O [BM, tile D]
    kv_smem: object  # K, V [BN, tile D]


class FwdBlocks(NamedTuple):
    """The forward's tile: BLOCK_M query rows per program over num_warps / 4 warpgroups, BLOCK_N keys per step,
    num_stages K/V stages in shared memory. consumers > 0: kernels/gluon/forward_pp.py's kernel, one partition per
    consumer warpgroup (BLOCK_M = 64 * consumers, num_warps = 4), with its switches overlap (intra-warpgroup
    overlap), pingpong (the consumers take turns issuing wgmmas) and lazy_rescale (O *= alpha only where a row's max
    grew by more than 2^8, forward_pp.RESCALE_THRESHOLD); consumers = 0: this file's kernel (its overlap is always
    on, its rescale eager)."""
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int
    consumers: int = 0
    overlap: bool = True
    pingpong: bool = False
    lazy_rescale: bool = False
    split_masked: bool = False  # consumers > 0: the key blocks left of the diagonal in a loop without the mask
    lpt: bool = False  # causal: programs in chunks of heads, each chunk's query blocks longest first across its heads
    persistent: bool = False  # consumers > 0: one program per SM walks the host's list schedule of the tiles
    deferred_sum: bool = False  # consumers > 0: the row sum l as per-thread partials, reduced across lanes once at the end


def default_forward_blocks(head_dim: int, causal: bool) -> FwdBlocks:
    """FA3's sm90 forward tiles, rounded to Gluon's powers of two: 128 query rows over two warpgroups (64 each),
    128 keys per step up to D128 (64 from D192 on: the O accumulator is 128-256 fp32 registers a thread), two K/V
    stages (D <= 128: three, 160-224 KB of shared memory). Compile-checked, not yet measured (docs/forward.md)."""
    tile = tile_dim(head_dim)
    if tile <= 64:
        return FwdBlocks(128, 128, 8, 3)
    if tile <= 128:
        return FwdBlocks(128, 128, 8, 2)
    return FwdBlocks(128, 64, 8, 2)


def forward_reason(q, k, v, causal: bool, *, varlen=None, mods=None, gate=None) -> str | None:
    """Why the Gluon forward cannot run this call (the caller then runs the stock Triton forward), or None.
    q [B, Nq, H, D], k/v [B, Nk, Hkv, D]."""
    if GLUON_MISSING is not None:
        return GLUON_MISSING
    if gate is not None:
        return "the Gluon forward has no forget gate"
    if q.dtype not in GLUON_FORWARD_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"the Gluon forward runs fp16 and bf16 (wgmma), not {q.dtype}"
    if q.shape[-1] not in GLUON_FORWARD_HEAD_DIMS:
        return f"the Gluon forward covers head dims {GLUON_FORWARD_HEAD_DIMS}, not {q.shape[-1]}"
    if k.shape[1] == 0:
        return "no keys (Nk = 0): nothing for the Gluon forward's K/V ring to load"
    if q.device.type != "cuda":
        return "the Gluon forward is a kernel for sm90 GPUs; this is a CPU tensor"
    if torch.cuda.get_device_capability(q.device)[0] != 9:
        major, minor = torch.cuda.get_device_capability(q.device)
        return f"the Gluon forward needs sm90 (wgmma, TMA); this is sm{major}{minor}"
    return None


@gluon.jit
def _gluon_fwd_kernel(q_desc, k_desc, v_desc, o_desc, tensors, sizes, docs, DIM: gl.constexpr, LAYOUTS: gl.constexpr,
                      STAGES: gl.constexpr, CAUSAL: gl.constexpr, MASKED: gl.constexpr, WINDOW_LEFT: gl.constexpr = -1,
                      WINDOW_RIGHT: gl.constexpr = -1, SOFTCAP: gl.constexpr = 0.0, VARLEN: gl.constexpr = False):
    """Grid (cdiv(Nq, BM) * B * H,) (VARLEN: (pairs * H,), docs: tiles.WsDocs; else placeholders). The TMA views
    (top-level arguments: Triton 3.6's launcher takes descriptors nowhere else): q / o [B * Nq, H, D] boxes
    [BM, 1, tile D]; k / v [B * Nk, Hkv, D] boxes [BN, 1, tile D].
    tensors: FwdTensors (O dense for a tail's masked stores, LSE [B, H, Nq] fp32); sizes: FwdSizes; LAYOUTS:
    FwdLayouts. MASKED: some key block crosses the causal diagonal, a window edge or Nk (else no block pays for the
    mask). WINDOW_LEFT / WINDOW_RIGHT / SOFTCAP: kernels.common.modifier_args' (forward_parts)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[2]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    rows = _program_rows(gl.program_id(0), sizes, docs, BLOCK_M, BLOCK_N, CAUSAL, WINDOW_LEFT, WINDOW_RIGHT, VARLEN)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], LAYOUTS.q_smem)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], LAYOUTS.kv_smem)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # a stage's K landed
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # a stage's V landed
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # S of that K is done
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())  # P V of that V is done
    mbarrier.init(q_ready, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=1)
        mbarrier.init(v_empty.index(s), count=1)
    ring = ((q_smem, k_smem, v_smem), (q_ready, k_ready, v_ready), (k_empty, v_empty))  # tiles, full, free
    gl.warp_specialize([
        (_softmax_partition, (ring, rows, o_desc, tensors, sizes.qk_scale, DIM, LAYOUTS, STAGES, CAUSAL, MASKED,
                              WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP)),
        (_load_partition, (q_desc, k_desc, v_desc, ring, rows, STAGES)),
    ], [1], [24])


@gluon.jit
def _load_partition(q_desc, k_desc, v_desc, ring, rows, STAGES: gl.constexpr):
    """One warp: Q once, then each key block's K (after `k_empty`: its stage's S is done) and V (after `v_empty`:
    its stage's P V is done), each on its own `ready` barrier."""
    tiles, full, free = ring
    q_smem, k_smem, v_smem = tiles
    q_ready, k_ready, v_ready = full
    k_empty, v_empty = free
    block, seqs, bases = rows
    i_h, i_hk, heads, start_m, key_blocks = block
    seq_q, seq_k = seqs
    q_row0, k_row0, lse_row0 = bases
    mbarrier.expect(q_ready, q_desc.block_type.nbytes)
    tma_load(q_desc, [q_row0 + start_m, i_h, 0], q_ready, as_box(q_smem))
    _kv_loads(k_desc, v_desc, (k_smem, v_smem), (k_ready, v_ready), (k_empty, v_empty), k_row0, i_hk, key_blocks,
              STAGES)


@gluon.jit
def _softmax_partition(ring, rows, o_desc, tensors, qk_scale, DIM: gl.constexpr, LAYOUTS: gl.constexpr,
                       STAGES: gl.constexpr, CAUSAL: gl.constexpr, MASKED: gl.constexpr, WINDOW_LEFT: gl.constexpr,
                       WINDOW_RIGHT: gl.constexpr, SOFTCAP: gl.constexpr):
    """The compute warps. Block 0: S, softmax. Block j >= 1: issue S_j, issue O += P_{j-1} V_{j-1}, wait for S_j
    alone (wgmma groups retire in issue order, S_j's first), block j's softmax while P V runs, wait for P V,
    O *= alpha_j. Last: O += P V of the last block, then O / l and the LSE out. P is carried between blocks as
    P V's register A operand (16-bit: half of S's registers)."""
    tiles, full, free = ring
    q_smem, k_smem, v_smem = tiles
    q_ready, k_ready, v_ready = full
    k_empty, v_empty = free
    O, LSE = tensors
    block, seqs, bases = rows
    i_h, i_hk, heads, start_m, key_blocks = block
    seq_q, seq_k = seqs
    q_row0, k_row0, lse_row0 = bases
    S_LAYOUT: gl.constexpr = LAYOUTS.s
    O_LAYOUT: gl.constexpr = LAYOUTS.o
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    HEAD_DIM: gl.constexpr = q_smem.shape[1]
    dtype: gl.constexpr = q_smem.dtype
    P_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    o_m = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, S_LAYOUT))  # query of each S row
    m = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, S_LAYOUT))
    l = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, S_LAYOUT))
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, O_LAYOUT)
    mbarrier.wait(q_ready, 0)

    s = _scores(q_smem, k_smem, k_ready, k_empty, 0, S_LAYOUT, STAGES)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    mbarrier.arrive(k_empty.index(0), count=1)  # K_0 read
    p, m, l, alpha = _online_softmax(s, m, l, o_m, 0, start_m, seq_q, seq_k, qk_scale, CAUSAL, MASKED, False, False,
                                     WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP)
    p = gl.convert_layout(p.to(dtype), P_OPERAND)  # carried as P V's A operand: 16-bit, half S's registers
    for j in range(1, key_blocks):
        s = _scores(q_smem, k_smem, k_ready, k_empty, j, S_LAYOUT, STAGES)
        prev = (j - 1) % STAGES
        mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
        acc = warpgroup_mma(p, v_smem.index(prev), acc, is_async=True)  # [BM, BN] @ [BN, D]
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))  # S_j done; P V may still run
        mbarrier.arrive(k_empty.index(j % STAGES), count=1)
        p, m, l, alpha = _online_softmax(s, m, l, o_m, j * BLOCK_N, start_m, seq_q, seq_k, qk_scale, CAUSAL,
                                         MASKED, False, False, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP)
        p = gl.convert_layout(p.to(dtype), P_OPERAND)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(v_empty.index(prev), count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT)), 1)
    last = (key_blocks - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((key_blocks - 1) // STAGES) & 1)
    acc = warpgroup_mma(p, v_smem.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    empty = l == 0.0  # rows that saw no key
    l_safe = gl.where(empty, 1.0, l)
    lse = gl.where(empty, float("inf"), m + gl.log2(l_safe))
    gl.store(LSE + lse_row0 + o_m, lse, mask=o_m < seq_q)
    out = acc * gl.expand_dims(gl.convert_layout(1.0 / l_safe, gl.SliceLayout(1, O_LAYOUT)), 1)
    if start_m + BLOCK_M <= seq_q:  # a whole query block: out through Q's shared tile by TMA
        cta_barrier()  # every warpgroup's wgmmas that read Q are done
        q_smem.store(out.to(dtype))
        fence_async_shared()
        cta_barrier()
        tma_store(o_desc, [q_row0 + start_m, i_h, 0], as_box(q_smem))  # columns past DIM: outside the view
        tma.store_wait(pendings=0)
    else:  # a tail: its rows past Nq are the next batch's in the view
        store_rows(O, (out,), 1.0, q_row0 + start_m, q_row0 + seq_q, heads, i_h, DIM, HEAD_DIM, 0)


@functools.cache  # host time of a launch: made once per tile config
def forward_layouts(block_m: int, block_n: int, head_dim: int, num_warps: int, dtype) -> FwdLayouts:
    """S [BM, BN] and O [BM, tile D] split by 16-row slices over the warps (a warpgroup owns BM / (num_warps / 4)
    rows); the shared layouts of the Q / O and K / V tiles (tile_dim(D) columns)."""
    tile = tile_dim(head_dim)

    def by_rows(n_cols):
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, n_cols, 16])

    return FwdLayouts(s=by_rows(block_n), o=by_rows(tile),
                      q_smem=gl.NVMMASharedLayout.get_default_for([block_m, tile], GL_DTYPES[dtype]),
                      kv_smem=gl.NVMMASharedLayout.get_default_for([block_n, tile], GL_DTYPES[dtype]))


def check_forward_blocks(blocks: FwdBlocks) -> None:
    """One-line ValueError naming the rule a tile breaks."""
    if blocks.consumers:
        if blocks.consumers not in (1, 2, 3) or blocks.BLOCK_M != 64 * blocks.consumers or blocks.num_warps != 4:
            raise ValueError(f"gluon forward: consumers={blocks.consumers}: 1-3 warpgroups, BLOCK_M = 64 x consumers "
                             f"(not {blocks.BLOCK_M}), num_warps = 4 (not {blocks.num_warps})")
        if blocks.pingpong and blocks.consumers < 2:
            raise ValueError("gluon forward: pingpong takes turns between at least 2 consumers")
    elif blocks.pingpong or not blocks.overlap or blocks.lazy_rescale or blocks.split_masked or blocks.persistent \
            or blocks.deferred_sum:
        raise ValueError("gluon forward: pingpong, overlap=False, lazy_rescale, split_masked, persistent and "
                         "deferred_sum need consumers > 0 (forward_pp's kernel)")
    if blocks.num_warps not in (4, 8):
        raise ValueError(f"gluon forward: num_warps={blocks.num_warps}: 4 or 8 (whole warpgroups)")
    if not blocks.consumers and (blocks.BLOCK_M not in (64, 128) or blocks.BLOCK_M % (16 * blocks.num_warps)):
        raise ValueError(f"gluon forward: BLOCK_M={blocks.BLOCK_M}: 64 or 128, a multiple of 16 x num_warps")
    if blocks.BLOCK_N not in (32, 64, 128, 256):
        raise ValueError(f"gluon forward: BLOCK_N={blocks.BLOCK_N}: 32, 64, 128 or 256")
    if blocks.num_stages < 2:
        raise ValueError(f"gluon forward: num_stages={blocks.num_stages}: at least 2 (K/V ring)")


def gluon_attention_forward(q, k, v, causal: bool, scale: float, blocks: FwdBlocks | None = None, mods=None,
                            varlen=None):
    """q [B, Nq, H, D], k/v [B, Nk, Hkv, D] fp16 / bf16 on an sm90 GPU -> (o [B, Nq, H, D] dense, lse [B, H, Nq]
    fp32, base 2): kernels.forward.attention_forward's outputs. A non-dense input is copied to dense first. mods: the
    window / softcap (variants.problem.Modifiers) or None. varlen: a kernels.varlen.Packing (B = 1, the packed
    length; causal and the window per document); its programs are the (document, query block) pairs, heaviest
    first, so persistent and lpt (dense orders) are off."""
    slot = memo("gluon_forward") if varlen is None else None  # a plan's phase: its key fixes all but the data
    if slot:
        return _warm_forward(slot, q, k, v, scale)
    batch, seq_q, heads, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    blocks = blocks or default_forward_blocks(head_dim, causal)
    check_forward_blocks(blocks)
    if varlen is not None:
        blocks = blocks._replace(persistent=False, lpt=False)
    copies = tuple(not dense_bnhd(t) for t in (q, k, v))  # which inputs are copied to dense (the phase key fixes it)
    q, k, v = (t.contiguous() if copy else t for t, copy in zip((q, k, v), copies))
    o = torch.empty_like(q)
    lse = torch.empty((batch, heads, seq_q), device=q.device, dtype=torch.float32)
    if seq_q == 0 or batch * heads == 0:
        if slot is not None:
            slot.update(kind="empty", lse_shape=(batch, heads, seq_q), copies=copies)
        return o, lse
    block_m, block_n = blocks.BLOCK_M, blocks.BLOCK_N
    modifiers = modifier_args(mods, False, causal)  # WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, GATED (off)
    left = modifiers["WINDOW_LEFT"]
    right = -1 if causal else modifiers["WINDOW_RIGHT"]  # causal: the kernels' diagonal is the right edge
    windowed = left >= 0 or right >= 0
    masked = causal or windowed or seq_k % block_n != 0 or seq_k == 0 or varlen is not None
    grid = (cdiv(seq_q, block_m) * batch * heads,)
    tensors = FwdTensors(o=o, lse=lse)
    docs = WsDocs(lse, lse, lse)  # placeholders unless varlen
    if varlen is not None:  # (document, query block) pairs, the most keys first
        pairs = varlen.block_indices(block_q=block_m, heaviest_first=True, causal=causal)
        docs = WsDocs(varlen.cu_seqlens_q, varlen.cu_seqlens_k, pairs)
        grid = (pairs.shape[0] * heads,)
    key_blocks = window_key_blocks(seq_q, seq_k, block_m, block_n, left, 0 if causal else right) \
        if blocks.lpt or blocks.persistent else None  # each query block's: the host's order and schedule only
    chunk = forward_chunk_heads(sm_count(q.device), batch * heads, key_blocks,
                                2 * seq_k * head_dim * q.element_size()) if blocks.lpt and causal else 1
    sizes = FwdSizes(seq_q=seq_q, seq_k=seq_k, heads=heads, kv_heads=kv_heads, batch_heads=batch * heads,
                     chunk_heads=chunk, qk_scale=float(scale) * LOG2E)
    schedule = FwdSchedule(lse, lse)  # unused unless persistent
    if blocks.persistent:
        schedule = FwdSchedule(*forward_schedule(q.device, chunk, batch * heads, key_blocks, causal))
        grid = (schedule.tile_starts.numel() - 1,)
    if blocks.consumers:  # one partition per consumer warpgroup, each with 64 query rows and a Q tile of its own
        from kernels.gluon.forward_pp import ROWS, FwdCfg, gluon_fwd_pp_kernel
        cfg = FwdCfg(DIM=head_dim, STAGES=blocks.num_stages, CAUSAL=causal, MASKED=masked,
                     CONSUMERS=blocks.consumers, OVERLAP=blocks.overlap, PINGPONG=blocks.pingpong,
                     LAZY=blocks.lazy_rescale, PERSISTENT=blocks.persistent, DEFERRED_SUM=blocks.deferred_sum,
                     SPLIT_MASKED=blocks.split_masked and masked and not windowed,
                     WINDOW_LEFT=left, WINDOW_RIGHT=right, SOFTCAP=modifiers["SOFTCAP"],
                     VARLEN=varlen is not None)
        rows = ROWS.value  # 64 query rows per consumer: Q and O boxes
        kernel, q_rows = gluon_fwd_pp_kernel, rows
        fixed = dict(LAYOUTS=forward_layouts(rows, block_n, head_dim, 4, q.dtype), CFG=cfg, num_warps=4)
        extra = dict(schedule=schedule)
    else:
        kernel, q_rows = _gluon_fwd_kernel, block_m
        fixed = dict(DIM=head_dim, LAYOUTS=forward_layouts(block_m, block_n, head_dim, blocks.num_warps, q.dtype),
                     STAGES=blocks.num_stages, CAUSAL=causal, MASKED=masked, WINDOW_LEFT=left,
                     WINDOW_RIGHT=right, SOFTCAP=modifiers["SOFTCAP"], VARLEN=varlen is not None,
                     num_warps=blocks.num_warps)
        extra = {}
    views = dict(q_desc=rows_descriptor(q, q_rows), k_desc=rows_descriptor(k, block_n),
                 v_desc=rows_descriptor(v, block_n), o_desc=rows_descriptor(o, q_rows))
    if slot is not None:  # never the call's tensors or the scale: descriptor fields without their base
        slot.update(kind="launch", kernel=kernel, grid=grid, fixed=fixed, sizes=tuple(sizes[:-1]),
                    lse_shape=(batch, heads, seq_q), copies=copies, schedule=schedule if blocks.persistent else None,
                    with_schedule=bool(extra), views=tuple((name, template(desc)) for name, desc in views.items()))
    if grid[0] == 0:  # every document empty
        return o, lse
    launch(kernel, grid, **views, tensors=tensors, sizes=sizes, docs=docs, **extra, **fixed)
    return o, lse


def _warm_forward(slot: dict, q, k, v, scale: float):
    """gluon_attention_forward from its phase memo (kernels.launch.memo): the launch the phase's first run made, with
    this call's tensors (the descriptors rebased on them) and scale."""
    q, k, v = (t.contiguous() if copy else t for t, copy in zip((q, k, v), slot["copies"]))
    o = torch.empty_like(q)
    lse = torch.empty(slot["lse_shape"], device=q.device, dtype=torch.float32)
    if slot["kind"] == "empty":
        return o, lse
    bases = dict(q_desc=q, k_desc=k, v_desc=v, o_desc=o)
    extra = dict(schedule=slot["schedule"] or FwdSchedule(lse, lse)) if slot["with_schedule"] else {}
    launch(slot["kernel"], slot["grid"], **{name: rebase(fields, bases[name]) for name, fields in slot["views"]},
           tensors=FwdTensors(o=o, lse=lse), sizes=FwdSizes(*slot["sizes"], qk_scale=float(scale) * LOG2E),
           docs=WsDocs(lse, lse, lse), **extra, **slot["fixed"])
    return o, lse
