"""ws: the FA3-structure backward on Hopper, in Gluon. One program per (key block, batch, kv head): K and V stay
in shared memory, dK and dV accumulate in registers, and the program walks every query block that sees its keys
(the query heads of its GQA group in turn; with group_split s, one program per slice of H / Hkv / s of them, dK and
dV then partials that kernels/partials.py adds). Per query block, all matmuls by async wgmma:

    S^T  = K Q^T        [BN, D] @ [D, BM] -> [BN, BM]    (swap AB: P^T, dS^T come out as the A operand below)
    dP^T = V dO^T       [BN, D] @ [D, BM] -> [BN, BM]
    P^T  = exp2(S^T * scale * log2 e - lse),  dS^T = P^T * (dP^T - delta)
    dV  += P^T dO       [BN, BM] (registers) @ [BM, D] -> [BN, D]
    dK  += dS^T Q       [BN, BM] (registers) @ [BM, D] -> [BN, D]
    dQ_i = dS K         [BM, BN] (shared, dS^T read transposed) @ [BN, D] -> [BM, D]

dQ_i goes to shared memory and is added into an fp32 accumulator [B * H * Nq, D] by one TMA reduce-add;
`dq_finish` scales it into dq. Q and dO arrive through a STAGES-deep TMA ring (mbarriers `ready` / `empty`), the
next blocks' loads in flight while this one computes. With WARP_SPECIALIZE (the default) a 1-warp partition issues
the loads (and stages LSE / delta in shared memory), a 1-warp partition the dQ reduce-adds, and the compute warps
(240 registers) only compute; without it, the compute warps issue both themselves (one partition). A key block's
dK and dV leave through K's and V's shared tiles by TMA stores. docs/ws.md
has the partitions, barriers and measured effects.

This file holds the kernel (its partitions listed once) and the host launch; the parts it is composed of live
beside it: the switches (config.WsConfig), the shared tiles and rings (ring.WsSmem, ring.Ring), the tile scheduler
(scheduler.tile_at), the load role (loads.load_partition), the MMA role (mma.mma_partition) and the epilogue
(epilogue.store_dk_dv, epilogue.dq_partition).

Tensors are read as 3-D TMA views [B * N, H, D] of dense [B, N, H, D] storage (`rows_descriptor`), boxes of
tile_dim(D) columns: zeros past D on loads, dropped on stores; a D that is no power of two runs its D-wide products
in `head_dim_chunks`. A block that runs past its sequence reads the next batch's (document's) first rows (or TMA
zeros after the last): those rows are masked out of S^T, so they add exactly 0 to dK, dV and dQ (and dQ's
reduce-add of those zero rows into the next head's accumulator rows changes nothing).

V, dO and dV may have a head dim Dv of their own (issue 47, MLA's 128 beside D 192; `WsConfig.DIM_V` and its
chunks): their views, shared tiles and dV's accumulator are Dv wide, dP^T = V dO^T reduces over Dv; S, dK and dQ
keep D. With Dv = D the kernel is the one it was (the same PTX, scripts/ptx_fingerprint.py).
"""
import functools
from typing import NamedTuple

import torch

from kernels.common import LOG2E, cdiv
from kernels.gluon.chunks import backward_chunk_heads
from kernels.gluon.compat import TensorDescriptor, gl, gluon
from kernels.gluon.config import make_config, named_handover_reason
from kernels.gluon.epilogue import DkDvOut, dq_partition
from kernels.gluon.loads import Loads, load_partition
from kernels.gluon.mma import mma_partition
from kernels.gluon.ring import ws_smem
from kernels.gluon.scheduler import (TILE_SETUP_STEPS, TileSizes, chunk_heads, program_tiles, query_steps,  # noqa: F401
                                     sm_count, tile_key_block, tile_schedule)
from kernels.gluon.tiles import (GL_DTYPES, WsDocs, cached_descriptor, chunk_tiles_reason, dense_bnhd,
                                  head_dim_chunks, head_dim_split_reason, rebase, rows_descriptor, shared_layout,
                                  template, tile_dim)
from kernels.launch import launch, memo
from kernels.partials import add_partials

HEAD_DIMS = (64, 96, 128, 192, 256)  # with measured or compile-checked tiles (variants.ws)


class WsTensors(NamedTuple):  # what the kernel reads and writes by pointer
    lse: object  # [B, H, Nq] fp32, base 2 (packed: [1, H, total_q])
    delta: object  # like lse
    dk: object  # [B, Nk, Hkv, D] dense (tails' masked stores)
    dv: object  # like dk


class WsSchedule(NamedTuple):  # PERSISTENT: the programs' tiles (`tile_schedule`), int32
    tiles: object  # [tiles], numbered as `tile_at` numbers them
    tile_starts: object  # [programs + 1]: program p walks tiles[tile_starts[p]:tile_starts[p + 1]]


class WsSizes(NamedTuple):  # the problem's sizes (VARLEN: seq_q, seq_k the packed totals) and the softmax scale
    seq_q: int
    seq_k: int
    heads: int
    kv_heads: int
    batch_kv_heads: int  # B * Hkv
    chunk_heads: int  # (batch, kv head) pairs per chunk of tiles (`chunk_heads`)
    qk_scale: float  # scale * log2(e): S to exp2's units
    sm_scale: float  # scale: dK's


class WsLayouts(NamedTuple):  # the kernel's register and shared layouts (`layouts`)
    s: object  # S^T / dP^T [BN, BM] (swap AB), else S / dP [BM, BN]
    kv: object  # dK [BN, D_MAIN]
    dq: object  # dQ [BM, D_MAIN]
    kv_r: object  # dK [BN, D_REST] (the second head-dim chunk; kv with one chunk)
    dq_r: object  # dQ [BM, D_REST] (dq with one chunk)
    ds_smem: object  # dS^T, P^T [BN, BM] (swap AB), else dS, P [BM, BN]
    stats_smem: object  # LSE, delta [BM] of a ring stage
    q_smem: object  # Q [BM, tile D]
    kv_smem: object  # K (dK) [BN, tile D]
    # issue 47: V's head dim Dv (chunks DV_MAIN + DV_REST) sizes dV, dO and V; the same as kv, kv_r, q_smem, kv_smem
    # when Dv = D
    kv_v: object  # dV [BN, DV_MAIN]
    kv_vr: object  # dV [BN, DV_REST] (kv_v with one chunk)
    do_smem: object  # dO [BM, tile Dv]
    v_smem: object  # V (dV) [BN, tile Dv]


@gluon.jit
def _ws_backward_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, q_r, k_r, v_r, do_r, dq_r, dk_r,
                        dv_r, tensors, schedule, docs, sizes, LAYOUTS: gl.constexpr, CFG: gl.constexpr):
    """Grid (cdiv(Nk, BLOCK_N) * B * Hkv,), one tile (key block of a (batch, kv head)) per program; PERSISTENT: grid
    (programs,), program p walks tiles TILES[TILE_STARTS[p]:TILE_STARTS[p + 1]] (schedule, a WsSchedule: int32, made
    on the host by kernels.gluon.scheduler.tile_schedule); VARLEN: grid (pairs * Hkv,), PAIRS [pairs, 2] = (document,
    key block), CU_Q / CU_K the cu_seqlens (docs, a WsDocs). The TMA views, each its own argument (Triton 3.6's
    launcher takes host descriptors only at the top level, not inside a tuple): q/do [B * Nq, H, D] boxes [BM, 1,
    tile D]; k/v/dk/dv [B * Nk, Hkv, D] boxes [BN, 1, tile D]; dq the fp32 accumulator [B * H * dq_rows(Nq), tile D]
    (packed: [H * total_q, tile D]) boxes [BM, tile D], rows reordered within groups of 8 (`bank_spread_rows`, not
    VARLEN). tensors (WsTensors): LSE (base 2), DELTA [B, H, Nq] fp32; DK, DV dense [B, Nk, Hkv, DIM]. sizes
    (WsSizes). LAYOUTS: a WsLayouts (`layouts`), *_r the second head-dim chunk's. CFG: the compile-time switches
    (kernels.gluon.config.WsConfig). q_r ... dv_r: chunk tiles' (CFG.CHUNK_TILES, CHUNK_TILES_V) second-chunk boxes
    [., 1, D_REST | DV_REST] of the same views (the first descriptors' boxes then D_MAIN | DV_MAIN wide), else None.
    The parts: the scheduler (kernels.gluon.scheduler) gives each role the same tiles and steps; the shared tiles and
    barriers are one WsSmem (kernels.gluon.ring); the roles are the load warp (kernels.gluon.loads), the compute
    warps (kernels.gluon.mma) and the reduce-add warp (kernels.gluon.epilogue.dq_partition). Without
    CFG.WARP_SPECIALIZE the compute warps issue the loads and reduce-adds themselves; CFG.WITH_DQ=False
    (ws_two_pass's dK/dV kernel): no dQ, no dQ warp, the compute warps hand each step's stage back themselves."""
    program = program_tiles(schedule, CFG.PERSISTENT)
    tile_sizes = TileSizes(sizes, docs)  # what the scheduler reads
    smem = ws_smem(q_desc, k_desc, v_desc, dq_desc, LAYOUTS, CFG)
    stores = DkDvOut(dk_desc, dv_desc, _or(dk_r, dk_desc), _or(dv_r, dv_desc), tensors.dk, tensors.dv, sizes.sm_scale)
    loads = Loads(q_desc, k_desc, v_desc, do_desc, _or(q_r, q_desc), _or(k_r, k_desc), _or(v_r, v_desc),
                  _or(do_r, do_desc))
    dq_r = _or(dq_r, dq_desc)
    stats = (tensors.lse, tensors.delta)
    # the partitions' arguments as tuple literals (a tuple assigned to a name would turn LAYOUTS into a tensor)
    if not CFG.WARP_SPECIALIZE:  # one partition issues everything
        mma_partition(smem, program, tile_sizes, stores, stats, sizes.qk_scale, LAYOUTS, CFG, loads, dq_desc, dq_r)
    elif CFG.WITH_DQ:
        gl.warp_specialize([
            (mma_partition, (smem, program, tile_sizes, stores, stats, sizes.qk_scale, LAYOUTS, CFG)),
            (load_partition, (loads, smem, program, tile_sizes, stats, CFG)),
            (dq_partition, (dq_desc, dq_r, smem, program, tile_sizes, CFG)),
        ], [1, 1], [24, 24])
    else:  # the compute warps and the load warp only
        gl.warp_specialize([
            (mma_partition, (smem, program, tile_sizes, stores, stats, sizes.qk_scale, LAYOUTS, CFG)),
            (load_partition, (loads, smem, program, tile_sizes, stats, CFG)),
        ], [1], [24])


@gluon.jit
def _or(desc, other):
    """desc, or other where desc is None (a chunk tile's descriptor without chunk tiles)."""
    if desc is None:
        return other
    else:
        return desc


@functools.cache  # host time of a launch: made once per tile config
def layouts(block_m: int, block_n: int, head_dim: int, num_warps: int, dtype, swap_ab: bool = True,
            split: bool = False, head_dim_v: int | None = None) -> WsLayouts:
    """The kernel's register and shared layouts (its LAYOUTS constexpr) for num_warps compute warps and block_n
    keys: S^T / dP^T [BN, BM] (swap_ab) and dK / dV [BN, D] split by rows over all its warps; dQ [BM, D],
    and S / dP [BM, BN] without swap_ab, by rows over as many warps as BM has 16-row slices, the rest split the
    columns. head_dim: the data's (the tiles have tile_dim(head_dim) columns); *_r: the layouts of the second
    head-dim chunk (`head_dim_chunks`, split: head_dim_split's; the first's when there is one chunk). head_dim_v:
    V's (dV, dO, V; None: head_dim's)."""
    d_main, d_rest = head_dim_chunks(head_dim, split)
    dv_main, dv_rest = head_dim_chunks(head_dim_v or head_dim, split)
    tile = tile_dim(head_dim)
    tile_v = tile_dim(head_dim_v or head_dim)
    warps_m = min(num_warps, block_m // 16)
    warps_kv = min(num_warps, block_n // 16)  # dK / dV rows; with fewer than 16 x num_warps keys the rest split D

    def split_by_rows(n_cols):  # [BM, n_cols] over num_warps warps: by 16-row slices of BM, then by columns
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps_m, num_warps // warps_m],
                                         instr_shape=[16, n_cols // (num_warps // warps_m), 16])

    def kv_layout(n_cols):  # [BN, n_cols] over num_warps warps: 16-row slices of BN, then columns
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps_kv, num_warps // warps_kv],
                                         instr_shape=[16, n_cols // (num_warps // warps_kv), 16])

    return WsLayouts(
        s=(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_m, 16])
           if swap_ab else split_by_rows(block_n)),
        kv=kv_layout(d_main), dq=split_by_rows(d_main), kv_r=kv_layout(d_rest or d_main),
        dq_r=split_by_rows(d_rest or d_main),
        ds_smem=gl.NVMMASharedLayout.get_default_for([block_n, block_m] if swap_ab else [block_m, block_n],
                                                     GL_DTYPES[dtype]),
        stats_smem=gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]),
        q_smem=gl.NVMMASharedLayout.get_default_for([block_m, tile], GL_DTYPES[dtype]),  # Q tiles
        kv_smem=gl.NVMMASharedLayout.get_default_for([block_n, tile], GL_DTYPES[dtype]),  # K (dK) tiles
        kv_v=kv_layout(dv_main), kv_vr=kv_layout(dv_rest or dv_main),
        do_smem=gl.NVMMASharedLayout.get_default_for([block_m, tile_v], GL_DTYPES[dtype]),  # dO tiles
        v_smem=gl.NVMMASharedLayout.get_default_for([block_n, tile_v], GL_DTYPES[dtype]))  # V (dV) tiles


def dq_rows(seq_q: int) -> int:
    """Rows per (batch, head) of the fp32 dQ accumulator: Nq rounded up to the 8-row groups that
    `bank_spread_rows` reorders (a query's row stays inside its head's)."""
    return cdiv(seq_q, 8) * 8


def accumulator_rows(seq_q: int, varlen) -> int:
    """Rows per (batch, head) of the dQ accumulator: dq_rows(Nq) (ws's 8-row groups), packed: total_q, in order."""
    return seq_q if varlen is not None else dq_rows(seq_q)


def new_accumulator(q: torch.Tensor, varlen=None, make=torch.empty) -> torch.Tensor:
    """ws's fp32 dQ accumulator [B * H * rows, tile_dim(D)] for q [B, Nq, H, D] (packed: [1, total_q, H, D]), by
    make (torch.empty: not zeroed)."""
    batch, seq_q, heads, head_dim = q.shape
    return make(batch * heads * accumulator_rows(seq_q, varlen), tile_dim(head_dim), device=q.device,
                dtype=torch.float32)


@functools.cache
def placeholder_accumulator(device, rows: int, cols: int) -> torch.Tensor:
    """The dQ accumulator ws_two_pass's dK/dV kernel is handed and never reads or writes (with_dq false): made once
    per device and box, not per call (issue 44: host cost). Never written, so sharing it is safe."""
    return torch.empty(rows, cols, device=device, dtype=torch.float32)


def accumulator_descriptor(dq_acc: torch.Tensor, head_dim: int, block_m: int, split: bool = False, cols: int = 0):
    """The TMA view of the fp32 dQ accumulator [rows, tile_dim(D)] (boxes [block_m, cols], 0: tile_dim(D); chunk
    tiles: a head-dim chunk's width). With two head-dim chunks the dQ tile's columns past D are never written, so
    the view is [rows, D] and the reduce-adds drop them; with one chunk they hold dS K's zeros and the whole width is
    added (whole boxes, as before head-dim chunks). split: head_dim_split's chunks (`head_dim_chunks`)."""
    box_cols = cols or dq_acc.shape[1]

    def make():
        width = head_dim if head_dim_chunks(head_dim, split)[1] else dq_acc.shape[1]
        return TensorDescriptor(dq_acc, [dq_acc.shape[0], width], list(dq_acc.stride()), [block_m, box_cols],
                                shared_layout((block_m, box_cols), torch.float32))
    return cached_descriptor(("dq_acc", dq_acc.shape, dq_acc.stride(), head_dim, block_m, split, box_cols), dq_acc,
                             make)


def tma_views(q, k, v, do, dq_acc, dk, dv, block_m: int, block_n: int, cfg, split: bool) -> dict:
    """The kernel's TMA descriptors by argument name: boxes tile_dim(D) (tile_dim(Dv)) wide and q_r ... dv_r None;
    chunk tiles (cfg.CHUNK_TILES for Q, K, dQ, dK; cfg.CHUNK_TILES_V for V, dO, dV): boxes of the first head-dim
    chunk, and *_r the same views' boxes of the second."""
    cols, cols_v = (cfg.D_MAIN if cfg.CHUNK_TILES else 0), (cfg.DV_MAIN if cfg.CHUNK_TILES_V else 0)
    rest, rest_v = (cfg.D_REST if cfg.CHUNK_TILES else 0), (cfg.DV_REST if cfg.CHUNK_TILES_V else 0)

    def views(cols, cols_v, dq_cols):
        return dict(q=rows_descriptor(q, block_m, cols), k=rows_descriptor(k, block_n, cols),
                    v=rows_descriptor(v, block_n, cols_v), do=rows_descriptor(do, block_m, cols_v),
                    dq=accumulator_descriptor(dq_acc, cfg.DIM, block_m, split, dq_cols),
                    dk=rows_descriptor(dk, block_n, cols), dv=rows_descriptor(dv, block_n, cols_v))
    out = {f"{name}_desc": desc for name, desc in views(cols, cols_v, cols).items()}
    second = views(rest or cols, rest_v or cols_v, rest or cols) if rest or rest_v else {}
    for name in ("q", "k", "v", "do", "dq", "dk", "dv"):
        out[f"{name}_r"] = second[name] if (rest if name in ("q", "k", "dq", "dk") else rest_v) else None
    return out


def ws_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float, BLOCK_M: int, BLOCK_N: int,
                num_warps: int, num_stages: int, warp_specialize: bool = True, swap_ab: bool = True,
                longest_first: bool = True, persistent: bool = False, window_left: int = -1, window_right: int = -1,
                softcap: float = 0.0, varlen=None, dq_acc=None, prefetch_scores: bool = False,
                early_dv: bool = False, p_in_dq: bool = False, head_dim_split: bool = False, chunk_tiles: bool = False,
                group_split: int = 1, fp32_partials: bool = True, named_handover: bool = False,
                late_stats: bool = False, dq_first: bool = False, split_masked: bool = False,
                scheduled_chunks: bool = False):
    """q, do [B, Nq, H, D], k, v [B, Nk, Hkv, D] dense, fp16 / bf16, D <= 256; lse (base 2), delta [B, H, Nq] fp32
    -> dq like q, dk / dv like k / v. window_left / window_right, softcap: score modifiers (ws_dkdv). varlen: a
    kernels.varlen.Packing, q / k ... [1, total, H, D], lse / delta [1, H, total_q]. dq_acc: the zeroed fp32
    accumulator (`new_accumulator`; variants.base has the delta launch zero it), or None (zeros here).
    group_split: programs per (key block, kv head), each walking H / Hkv / group_split of the group's query heads:
    dK / dV as partials (ws_dkdv; fp32_partials: fp32, else in K's dtype through the TMA stores), added here
    (kernels.partials)."""
    from kernels.dq_finish import dq_finish

    if group_split != 1 and (reason := group_split_reason(q.shape[2], k.shape[2], group_split)):
        raise ValueError(f"ws: {reason}")
    q, k, v, do = (t if dense_bnhd(t) else t.contiguous() for t in (q, k, v, do))
    if group_split == 1:
        dk, dv = torch.empty_like(k), torch.empty_like(v)
    else:  # partials [B, Nk, Hkv * group_split, D]: slice s of kv head h at h * group_split + s
        dk, dv = (torch.empty(*t.shape[:2], t.shape[2] * group_split, t.shape[3], device=t.device,
                              dtype=torch.float32 if fp32_partials else t.dtype) for t in (k, v))
    dq_acc = new_accumulator(q, varlen, torch.zeros) if dq_acc is None else dq_acc  # [B * H * rows, tile_dim(D)]
    ws_dkdv(q, k, v, do, lse, delta, dk, dv, dq_acc, causal=causal, scale=scale, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
            num_warps=num_warps, num_stages=num_stages, warp_specialize=warp_specialize, swap_ab=swap_ab,
            longest_first=longest_first, persistent=persistent,
            window_left=window_left, window_right=window_right, softcap=softcap, varlen=varlen,
            prefetch_scores=prefetch_scores, early_dv=early_dv, p_in_dq=p_in_dq, head_dim_split=head_dim_split,
            chunk_tiles=chunk_tiles, group_split=group_split, named_handover=named_handover, late_stats=late_stats,
            dq_first=dq_first, split_masked=split_masked, scheduled_chunks=scheduled_chunks)
    dq = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    dq_finish(dq_acc, dq, scale, spread_rows=varlen is None)  # [B * H * rows, tile_dim(D)]: B * H blocks of rows
    if group_split > 1:
        dk, dv = (add_partials(t, group_split, q.dtype) for t in (dk, dv))
    return dq, dk, dv


def group_split_reason(heads: int, kv_heads: int, group_split: int) -> str | None:
    """Why group_split cannot slice this problem's GQA groups (None: it can)."""
    group = heads // kv_heads
    if group_split < 1 or group % group_split:
        return (f"group_split={group_split} must divide the GQA group's {group} query heads per kv head "
                f"(H={heads}, Hkv={kv_heads})")
    return None


def ws_dkdv(q, k, v, do, lse, delta, dk, dv, dq_acc, *, causal: bool, scale: float, BLOCK_M: int, BLOCK_N: int,
            num_warps: int, num_stages: int, warp_specialize: bool = True, swap_ab: bool = True,
            longest_first: bool = True, persistent: bool = False, window_left: int = -1, window_right: int = -1,
            softcap: float = 0.0, varlen=None, prefetch_scores: bool = False, early_dv: bool = False,
            p_in_dq: bool = False, head_dim_split: bool = False, chunk_tiles: bool = False,
            group_split: int = 1, named_handover: bool = False, late_stats: bool = False,
            dq_first: bool = False, split_masked: bool = False, scheduled_chunks: bool = False) -> None:
    """The main kernel's launch: dk, dv (like k, v, dense) and, given dq_acc ([B * H * dq_rows(Nq), tile_dim(D)]
    fp32, zeroed; packed: [H * total_q, tile_dim(D)]), dQ reduce-added into it; dq_acc=None (ws_two_pass,
    warp_specialize only): dk and dv alone. window_left / window_right: a sliding window as
    variants.problem.window_pair normalizes it (-1 = unbounded); softcap > 0: scores s -> softcap * tanh(s / softcap)
    (Gemma 2). varlen: a kernels.varlen.Packing (q ... [1, total, H, D]; not with persistent). prefetch_scores: each
    step's S / dP wgmmas issued at the end of the step before (num_stages >= 2); early_dv (swap_ab=false): dV's
    wgmma issued before dP is waited; p_in_dq (swap_ab=false, with dQ, BLOCK_N <= 2 tile_dim(D)): P's shared tile
    over the dQ tile's bytes (kernels.gluon.config.WsConfig); head_dim_split: D96's products in 64 + 32 head-dim
    chunks instead of one 128-column chunk (`head_dim_chunks`; one-line error at a head dim it does not change);
    chunk_tiles: each D-wide shared tile and TMA box as two, one per head-dim chunk (192 = 128 + 64: no zero
    columns in shared memory, so a second Q / dO stage fits; one-line error at a head dim without two chunks);
    group_split: each kv head's query heads over group_split programs per key block, dk / dv then partials
    [B, Nk, Hkv * group_split, D] (slice s of kv head h at h * group_split + s), fp32 or in K's dtype.
    named_handover: the compute warps hand a step's dQ to the dQ warp by a named barrier's bar.arrive
    (kernels.gluon.named; needs warp_specialize, num_warps=8, p_in_dq=false; no effect without dQ). late_stats (swap_ab,
    warp_specialize; no effect otherwise): LSE and delta loaded from shared memory at their use. dq_first (with dQ):
    a step's dQ wgmma issued before its dK wgmma, so dK's runs through the dQ tile's staging and hand-over.
    split_masked: the steps that need the mask and those that do not in loops of their own (no effect without a
    masked block, with a left window edge or with prefetch_scores). scheduled_chunks (causal, longest_first, dense): the (batch, kv head)
    pairs per chunk of tiles by chunks.backward_chunk_heads (a simulated list schedule), not about one wave."""
    slot = memo("ws_dkdv") if varlen is None else None  # a plan's phase: what its key fixes, worked out once
    if slot:
        _warm_dkdv(slot, q, k, v, do, lse, delta, dk, dv, dq_acc, scale)
        return
    batch, seq_q, heads, head_dim = q.shape
    seq_k, head_dim_v = k.shape[1], v.shape[-1]
    kv_heads = k.shape[2] * group_split  # the tiles' kv heads: group_split slices of each of K's
    with_dq = dq_acc is not None
    if not with_dq and not warp_specialize:
        raise ValueError("ws_dkdv without dQ: warp_specialize only")
    if prefetch_scores and num_stages < 2:
        raise ValueError(f"ws: prefetch_scores=true needs num_stages >= 2 (the next step's Q / dO is waited for "
                         f"before this step's stage goes back), got {num_stages}")
    if chunk_tiles and chunk_tiles_reason(head_dim, head_dim_v):
        raise ValueError(f"ws: {chunk_tiles_reason(head_dim, head_dim_v)}")
    dq_cols = head_dim_chunks(head_dim)[0] if chunk_tiles and head_dim_chunks(head_dim)[1] else tile_dim(head_dim)
    if p_in_dq and (swap_ab or not with_dq or BLOCK_N > 2 * dq_cols):
        raise ValueError(f"ws: p_in_dq=true needs swap_ab=false, dQ and BLOCK_N <= 2 x the tiles' head dim (P's "
                         f"[BLOCK_M, BLOCK_N] 16-bit tile inside dQ's fp32 one), got swap_ab={swap_ab}, "
                         f"BLOCK_N={BLOCK_N}, D={head_dim}")
    if named_handover and (reason := named_handover_reason(num_warps, warp_specialize, p_in_dq)):
        raise ValueError(f"ws: {reason}")
    if head_dim_split and head_dim_split_reason(head_dim):
        raise ValueError(f"ws: {head_dim_split_reason(head_dim)}")
    if varlen is not None and persistent:
        raise ValueError("ws: persistent=true does not walk packed (varlen) batches yet; use persistent=false")
    windowed = window_left >= 0 or window_right >= 0
    masked = causal or windowed or varlen is not None or seq_q % BLOCK_M != 0 or seq_k % BLOCK_N != 0
    if seq_k == 0:
        if slot is not None:
            slot["kind"] = "zero"
        dk.zero_()
        dv.zero_()
        return
    if dq_acc is None:  # no dQ: a placeholder descriptor (the kernel never touches it), one per device and box
        dq_acc = placeholder_accumulator(q.device, BLOCK_M, tile_dim(head_dim))
    key_blocks = cdiv(seq_k, BLOCK_N)
    group = heads // kv_heads
    steps = query_steps(seq_q, seq_k, BLOCK_M, BLOCK_N, group, causal, window_left, window_right) \
        if varlen is None and (persistent or scheduled_chunks) else None  # each key block's steps, as tile_at counts
    if scheduled_chunks and causal and longest_first and varlen is None:  # the simulated schedule's best chunk
        pair_bytes = group * seq_q * ((head_dim + head_dim_v) * q.element_size() + (4 * head_dim if with_dq else 0))
        heads_per_chunk = backward_chunk_heads(sm_count(q.device), batch * kv_heads, steps, pair_bytes)
    else:
        heads_per_chunk = chunk_heads(q.device, seq_k, BLOCK_N, batch * kv_heads, causal and longest_first)
    cu_q = cu_k = pairs = dq_acc  # unused unless varlen
    if varlen is not None:  # one program per (document, key block) pair and kv head, longest first under causal
        pairs = varlen.block_indices(block_k=BLOCK_N, heaviest_first=longest_first, causal=causal)  # [pairs, 2]
        cu_q, cu_k = varlen.cu_seqlens_q, varlen.cu_seqlens_k
        tiles = tile_starts = dq_acc  # unused
        grid = (pairs.shape[0] * kv_heads,)
    elif persistent:
        tiles, tile_starts = tile_schedule(q.device, key_blocks, batch * kv_heads, heads_per_chunk, steps)
        grid = (tile_starts.numel() - 1,)
    else:
        tiles = tile_starts = dq_acc  # unused
        grid = (key_blocks * batch * kv_heads,)
    if grid[0] == 0:
        if slot is not None:
            slot["kind"] = "none"
        return
    d_main, d_rest = head_dim_chunks(head_dim, head_dim_split)
    dv_main, dv_rest = head_dim_chunks(head_dim_v, head_dim_split)
    cfg = make_config(head_dim=head_dim, d_main=d_main, d_rest=d_rest, stages=num_stages, causal=causal,
                      window_left=window_left, window_right=window_right, softcap=softcap, masked=masked,
                      warp_specialize=warp_specialize, swap_ab=swap_ab, persistent=persistent,
                      varlen=varlen is not None, with_dq=with_dq, prefetch=prefetch_scores, early_dv=early_dv,
                      p_in_dq=p_in_dq, head_dim_v=head_dim_v, dv_main=dv_main, dv_rest=dv_rest,
                      chunk_tiles=chunk_tiles, group_split=group_split, fp32_partials=dk.dtype == torch.float32,
                      named_handover=named_handover, late_stats=late_stats, dq_first=dq_first,
                      split_masked=split_masked)
    views = tma_views(q, k, v, do, dq_acc, dk, dv, BLOCK_M, BLOCK_N, cfg, head_dim_split)
    fixed = dict(LAYOUTS=layouts(BLOCK_M, BLOCK_N, head_dim, num_warps, q.dtype, swap_ab, head_dim_split, head_dim_v),
                 CFG=cfg, num_warps=num_warps)
    sizes = WsSizes(seq_q=seq_q, seq_k=seq_k, heads=heads, kv_heads=kv_heads, batch_kv_heads=batch * kv_heads,
                    chunk_heads=heads_per_chunk, qk_scale=scale * LOG2E, sm_scale=scale)
    if slot is not None:  # dense (varlen has no memo): the docs are the accumulator, the schedule too unless persistent
        slot.update(kind="launch", grid=grid, fixed=fixed, sizes=tuple(sizes[:-2]),
                    placeholder=None if with_dq else dq_acc, schedule=(tiles, tile_starts) if persistent else None,
                    views=tuple((name, _VIEW_SOURCES.index(name.rsplit("_", 1)[0]), template(desc))
                                for name, desc in views.items()))
    launch(_ws_backward_kernel, grid, **views, tensors=WsTensors(lse=lse, delta=delta, dk=dk, dv=dv),
           schedule=WsSchedule(tiles=tiles, tile_starts=tile_starts), docs=WsDocs(cu_q=cu_q, cu_k=cu_k, pairs=pairs),
           sizes=sizes, **fixed)


_VIEW_SOURCES = ("q", "k", "v", "do", "dq", "dk", "dv")  # tma_views' argument names, *_desc / *_r, by tensor


def _warm_dkdv(slot: dict, q, k, v, do, lse, delta, dk, dv, dq_acc, scale: float) -> None:
    """ws_dkdv's launch from its phase memo (kernels.launch.memo): the arguments the first run of the phase made,
    with this call's tensors (descriptors rebased on them) and scale. The same objects and values as the full path."""
    kind = slot["kind"]
    if kind != "launch":
        if kind == "zero":
            dk.zero_()
            dv.zero_()
        return
    if dq_acc is None:
        dq_acc = slot["placeholder"]
    sources = (q, k, v, do, dq_acc, dk, dv)
    views = {name: None if fields is None else rebase(fields, sources[index]) for name, index, fields in slot["views"]}
    schedule = slot["schedule"]
    launch(_ws_backward_kernel, slot["grid"], **views, tensors=WsTensors(lse, delta, dk, dv),
           schedule=WsSchedule(dq_acc, dq_acc) if schedule is None else WsSchedule(*schedule),
           docs=WsDocs(dq_acc, dq_acc, dq_acc), sizes=WsSizes(*slot["sizes"], scale * LOG2E, scale), **slot["fixed"])
