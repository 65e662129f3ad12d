"""Issue 43 / D192 chunk tiles: does ws's shared set at D 192 / 192 fit two Q / dO stages when every D-wide shared
tile is two tiles, [rows, 128] + [rows, 64]? (no GPU: compiled for sm90 only, never launched)

    python scripts/d192_chunk_probe.py            # the installed Triton
    python scripts/d192_chunk_probe.py --both     # and /work/venv36/bin/python (Triton 3.6, the GPU machines')

One @gluon.jit kernel allocates ws's shared tiles in ws_smem's order (kernels/gluon/ring.py) for BM = BN = 64,
swap_ab=false (P and dS [64, 64] in shared memory), STAGES stages, either as today (CHUNKED=False: every D-wide
tile 256 columns, tile_dim(192)) or chunked (two tiles per tensor, each filled by its own TMA box of one [rows, 192]
view; the fp32 dQ tile as [64, 128] + [64, 64], each reduce-added by its own box). It issues what ws issues against
those tiles: K, V, Q, dO loads, S = Q K^T over K = 128 + 64, dQ = dS K in two accumulators staged into the two fp32
tiles, both reduce-added, dK / dV stores out of K's and V's tiles. The compiler's shared-memory size is the answer
(H100 / H200: 232,448 B = 227 KB per block at most). Results: results/h100/gluon/frontier_probe.md, "D192 chunk tiles".
"""
import os
import re
import sys

os.environ["TRITON_INTERPRET"] = "0"  # Gluon compiles, never interprets
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,  # noqa: E402
                                                              warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
from gluon_tile_probe import also_under_36, answer, ask  # noqa: E402
from kernels.gluon.compat import tma_load, tma_reduce_add, tma_store  # noqa: E402  (3.9 / 3.6 names, as ws)
SMEM_LIMIT = 232_448  # bytes of shared memory a block may take on sm90
ROWS = 64  # BM = BN


def nvmma(block, dtype):
    return gl.NVMMASharedLayout.get_default_for(list(block), dtype)


def view_desc(cols, box_cols, dtype=torch.bfloat16, rows=4096):
    """A 2-D TMA view [rows, cols] (the probe's stand-in for ws's [B * N, H, D] views) with boxes [ROWS, box_cols]."""
    t = torch.empty(rows, cols, dtype=dtype)
    gdt = gl.float32 if dtype == torch.float32 else gl.bfloat16
    return TensorDescriptor(t, [rows, cols], list(t.stride()), [ROWS, box_cols], nvmma([ROWS, box_cols], gdt))


@gluon.jit
def _tile(desc, STAGES: gl.constexpr):
    """[STAGES, ROWS, box cols] shared tiles in desc's layout (STAGES 0: one [ROWS, box cols] tile)."""
    if STAGES > 0:
        return gl.allocate_shared_memory(desc.dtype, [STAGES] + desc.block_type.shape, desc.layout)
    else:
        return gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout)


@gluon.jit
def ws_set(main, rest, acc_main, acc_rest, out, STAGES: gl.constexpr, CHUNKED: gl.constexpr,
           num_warps: gl.constexpr):
    """ws's D192 shared set (module docstring); main / rest: the bf16 views' boxes [64, 128] + [64, 64] (CHUNKED) or
    [64, 256] (rest unused); acc_main / acc_rest: the fp32 accumulator's, likewise."""
    R: gl.constexpr = main.block_type.shape[0]
    MAIN: gl.constexpr = main.block_type.shape[1]
    REST: gl.constexpr = rest.block_type.shape[1]
    # ws_smem's order: K, V, Q ring, dO ring, dS, dQ, P, LSE, delta, barriers
    k_m = _tile(main, 0)
    v_m = _tile(main, 0)
    if CHUNKED:
        k_r = _tile(rest, 0)
        v_r = _tile(rest, 0)
    q_m = _tile(main, STAGES)
    if CHUNKED:
        q_r = _tile(rest, STAGES)
    do_m = _tile(main, STAGES)
    if CHUNKED:
        do_r = _tile(rest, STAGES)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([R, R], gl.bfloat16)
    ds = gl.allocate_shared_memory(gl.bfloat16, [R, R], ds_layout)
    dq_m = _tile(acc_main, 0)
    if CHUNKED:
        dq_r = _tile(acc_rest, 0)
    p = gl.allocate_shared_memory(gl.bfloat16, [R, R], ds_layout)
    stats: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
    lse = gl.allocate_shared_memory(gl.float32, [STAGES, R], stats)
    delta = gl.allocate_shared_memory(gl.float32, [STAGES, R], stats)
    bars = gl.allocate_shared_memory(gl.int64, [4 + 2 * STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    nbytes: gl.constexpr = main.block_type.nbytes + (rest.block_type.nbytes if CHUNKED else 0)
    mbarrier.expect(bars.index(0), 2 * nbytes)
    tma_load(main, [0, 0], bars.index(0), k_m)
    tma_load(main, [R, 0], bars.index(0), v_m)
    if CHUNKED:
        tma_load(rest, [0, MAIN], bars.index(0), k_r)
        tma_load(rest, [R, MAIN], bars.index(0), v_r)
    for s in gl.static_range(STAGES):  # every stage filled, so no tile is dead
        mbarrier.init(bars.index(1 + s), count=1)
        mbarrier.expect(bars.index(1 + s), 2 * nbytes)
        tma_load(main, [2 * R + s * R, 0], bars.index(1 + s), q_m.index(s))
        tma_load(main, [3 * R + s * R, 0], bars.index(1 + s), do_m.index(s))
        if CHUNKED:
            tma_load(rest, [2 * R + s * R, MAIN], bars.index(1 + s), q_r.index(s))
            tma_load(rest, [3 * R + s * R, MAIN], bars.index(1 + s), do_r.index(s))
    mbarrier.wait(bars.index(0), phase=0)
    L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, num_warps // 4],
                                                instr_shape=[16, R // (num_warps // 4), 16])
    L_R: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, num_warps // 4],
                                                  instr_shape=[16, 64 // (num_warps // 4), 16])
    L_M: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, num_warps // 4],
                                                  instr_shape=[16, 128 // (num_warps // 4), 16])
    total = gl.zeros([R, R], gl.float32, L)
    for s in gl.static_range(STAGES):
        mbarrier.wait(bars.index(1 + s), phase=0)
        if CHUNKED:  # S = Q K^T over K = 128 + 64: the chunk is the tile, not a column slice
            acc = warpgroup_mma(q_m.index(s), k_m.permute((1, 0)), gl.zeros([R, R], gl.float32, L), use_acc=False)
            acc = warpgroup_mma(q_r.index(s), k_r.permute((1, 0)), acc)
            acc = warpgroup_mma(do_m.index(s), v_m.permute((1, 0)), acc)
            acc = warpgroup_mma(do_r.index(s), v_r.permute((1, 0)), acc)
        else:  # today's: column slices of the 256-wide tiles
            acc = warpgroup_mma(q_m.index(s).slice(0, 128, 1), k_m.slice(0, 128, 1).permute((1, 0)),
                                gl.zeros([R, R], gl.float32, L), use_acc=False)
            acc = warpgroup_mma(q_m.index(s).slice(128, 64, 1), k_m.slice(128, 64, 1).permute((1, 0)), acc)
            acc = warpgroup_mma(do_m.index(s).slice(0, 128, 1), v_m.slice(0, 128, 1).permute((1, 0)), acc)
            acc = warpgroup_mma(do_m.index(s).slice(128, 64, 1), v_m.slice(128, 64, 1).permute((1, 0)), acc)
        total += acc + gl.expand_dims(lse.index(s).load(gl.SliceLayout(0, L)), 0) \
            + gl.expand_dims(delta.index(s).load(gl.SliceLayout(0, L)), 0)
    p.store(total.to(gl.bfloat16))
    ds.store((total * 2.0).to(gl.bfloat16))
    fence_async_shared()
    # dQ = dS K, [64, 64] @ [64, 192] as two accumulators, each into its own fp32 tile (or the 256 tile's slices)
    if CHUNKED:
        dq0 = warpgroup_mma(ds, k_m, gl.zeros([R, 128], gl.float32, L_M), use_acc=False)
        dq1 = warpgroup_mma(p, k_r, gl.zeros([R, 64], gl.float32, L_R), use_acc=False)
        dq_m.store(dq0)
        dq_r.store(dq1)
    else:
        dq0 = warpgroup_mma(ds, k_m.slice(0, 128, 1), gl.zeros([R, 128], gl.float32, L_M), use_acc=False)
        dq1 = warpgroup_mma(p, k_m.slice(128, 64, 1), gl.zeros([R, 64], gl.float32, L_R), use_acc=False)
        dq_m.slice(0, 128, 1).store(dq0)
        dq_m.slice(128, 64, 1).store(dq1)
    fence_async_shared()
    tma_reduce_add(acc_main, [0, 0], dq_m)
    if CHUNKED:
        tma_reduce_add(acc_rest, [0, MAIN], dq_r)
    tma_store(main, [4 * R, 0], k_m)  # dK / dV out through K's and V's tiles
    if CHUNKED:
        tma_store(rest, [4 * R, MAIN], k_r)
    tma.store_wait(0)
    gl.store(out, gl.sum(gl.sum(total, axis=1), axis=0))


def case(stages: int, chunked: bool):
    """(fn, args, kwargs) of one ws_set compile."""
    if chunked:
        args = (view_desc(192, 128), view_desc(192, 64), view_desc(192, 128, torch.float32),
                view_desc(192, 64, torch.float32))
    else:  # today's: 256-column boxes of the same views (zeros past 192)
        args = (view_desc(192, 256), view_desc(192, 64), view_desc(256, 256, torch.float32),
                view_desc(256, 64, torch.float32))
    return ws_set, args + (torch.empty(1, dtype=torch.float32), stages, chunked), {"num_warps": 8}


def fit_answer(stages: int, chunked: bool) -> str:
    """The compile's answer line, with whether its shared memory fits sm90's block limit."""
    text = answer(lambda: case(stages, chunked))
    found = re.search(r"(\d+) B shared", text)
    if not found:
        return text
    used = int(found.group(1))
    verdict = "fits" if used <= SMEM_LIMIT else f"over by {used - SMEM_LIMIT:,} B"
    return f"{used:,} B = {used / 1024:.1f} KB: {verdict}  [{text}]"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(f"triton {triton.__version__} (compiled for sm90, not launched; sm90's limit {SMEM_LIMIT:,} B)", flush=True)
    for chunked in (False, True):
        for stages in (1, 2, 3):
            what = f"D192 ws set, {'chunk tiles 128 + 64' if chunked else 'tiles 256 wide'}, {stages} stage(s)"
            ask(what, lambda: ("text", fit_answer(stages, chunked), {}))
    also_under_36(argv, __file__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
