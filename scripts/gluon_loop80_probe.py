"""The looped version of scripts/gluon_step80_probe.py: one key block's ws D128 swap-AB loop over query blocks of
BM = 64 + N1 rows (N1 = 16: FA3's 80), dK / dV carried across steps, under ws's register split (8 compute warps at
setmaxnreg 240, a load warp and a dQ warp at 24), with a 2-stage ring of [64, D] + [N1, D] Q / dO tiles. Does it
compile without spills? (issue 43; no GPU: compiled for sm90 only, never launched)

    python scripts/gluon_loop80_probe.py            # the installed Triton
    python scripts/gluon_loop80_probe.py --both     # and /work/venv36/bin/python (the GPU machines' Triton 3.6)

Roles (gl.warp_specialize, as kernels/gluon/ws.py's [1, 1] workers at [24, 24] registers):
  compute (default, 8 warps): per step the probe's step (S^T, dP^T as n64 + nN1 wgmmas; P^T, dS^T; dV, dK +=
    K = 64 then K = N1 register-A wgmmas; dQ^T = K^T dS^T into [D, 64] + [D, N1] fp32 shared tiles), then hands
    the Q / dO stage back and the dQ^T tiles to the dQ warp; dK, dV stored after the loop.
  load (1 warp): K, V once; per step Q and dO as a [64, D] and an [N1, D] box into the ring's stage.
  dq (1 warp): per step TMA-stores the dQ^T tiles (a store, not ws's reduce-add: the same shared tiles and barriers).
STATS: 0 LSE / delta from global memory per step (gl.load of two slices, as the one-step probe), 1 from shared
memory (the load warp copies the BM-entry slices into a [2, 128] fp32 tile per stage; the compute warps read
both slices there). WITH_DQ = False drops dS^T's store, the dQ^T wgmmas and the dQ warp (what dQ costs).
SYNC, the issue order: 0 both chunks' S^T, dP^T waited at once; 1 and dK / dV waited before dQ^T; 2 chunk 1's
S^T, dP^T issued after chunk 0's dV, dK (and 1); 3 as 2 with one dQ^T chunk in registers at a time; 4 as 3 without
chunk 1's dQ^T (attribution only: dQ is then wrong for those rows).
Results: results/h100/gluon/frontier_probe.md section 4.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gluon_tile_probe import also_under_36, ask, compile_sm90, desc, one_line, triton, wgmma_shapes  # noqa: E402
from gluon_tile_probe import TensorDescriptor, fence_async_shared, gl, gluon, mbarrier, tma  # noqa: E402
from gluon_tile_probe import tma_load, tma_store, warpgroup_mma, warpgroup_mma_wait  # noqa: E402
import torch  # noqa: E402
from kernels.gluon.compat import cta_barrier  # noqa: E402
from kernels.gluon.ring import init_ring, ring  # noqa: E402

N0 = gl.constexpr(64)


@gluon.jit
def _loads(q_desc, qh_desc, k_desc, v_desc, LSE, DELTA, sm, steps, N1: gl.constexpr, STATS: gl.constexpr):
    """One warp: K, V once (kv barrier), then each step's Q / dO rows [i BM, i BM + BM) into stage i % 2."""
    k_s, v_s, q_s, do_s, qh_s, doh_s, st_s, r, kv, dq_full, dq_free = sm
    BM: gl.constexpr = N0 + N1
    mbarrier.expect(kv, 2 * k_desc.block_type.nbytes)
    tma_load(k_desc, [0, 0], kv, k_s)
    tma_load(v_desc, [0, 0], kv, v_s)
    for i in range(steps):
        s = r.stage(i)
        r.wait_free(i)
        if STATS == 1:  # LSE / delta slices into the stage's two rows of st_s (plain stores)
            cols = gl.arange(0, 128, layout=gl.BlockedLayout([4], [32], [1], [0]))
            ok = cols < BM
            st_s.index(2 * s).store(gl.load(LSE + i * BM + cols, mask=ok, other=0.0))
            st_s.index(2 * s + 1).store(gl.load(DELTA + i * BM + cols, mask=ok, other=0.0))
            fence_async_shared()
        mbarrier.expect(r.filled(i), 2 * (q_desc.block_type.nbytes + (qh_desc.block_type.nbytes if N1 > 0 else 0)))
        tma_load(q_desc, [i * BM, 0], r.filled(i), q_s.index(s))
        tma_load(q_desc, [i * BM, 0], r.filled(i), do_s.index(s))
        if N1 > 0:
            tma_load(qh_desc, [i * BM + N0, 0], r.filled(i), qh_s.index(s))
            tma_load(qh_desc, [i * BM + N0, 0], r.filled(i), doh_s.index(s))


@gluon.jit
def _dq_stores(dq_desc, dqh_desc, dq_s, dq_full, dq_free, steps, N1: gl.constexpr, WITH_DQ: gl.constexpr):
    """One warp: each step's dQ^T [D, 64] + [D, N1] tiles to global memory, then frees them."""
    if WITH_DQ:
        for i in range(steps):
            mbarrier.wait(dq_full, i & 1)
            tma_store(dq_desc, [0, i * (N0 + N1)], dq_s[0])
            if N1 > 0:
                tma_store(dqh_desc, [0, i * (N0 + N1) + N0], dq_s[1])
            tma.store_wait(0)
            mbarrier.arrive(dq_free, count=1)


@gluon.jit
def _stats(st_s, LSE, DELTA, s, lo: gl.constexpr, N: gl.constexpr, L: gl.constexpr, STATS: gl.constexpr):
    """lse, delta [N] of the step's query columns [lo, lo + N) (slices of the parent L's columns)."""
    SL: gl.constexpr = gl.SliceLayout(0, L)
    if STATS == 0:
        cols = lo + gl.arange(0, N, layout=SL)  # LSE, DELTA: the step's first row
        return gl.load(LSE + cols), gl.load(DELTA + cols)
    else:
        return (st_s.index(2 * s).slice(lo, N).load(SL), st_s.index(2 * s + 1).slice(lo, N).load(SL))


@gluon.jit
def _chunk(s_t, dp, lse, delta, qk_scale):
    """P^T, dS^T [BN, N] (bf16) of one query chunk."""
    p = gl.exp2(s_t * qk_scale - gl.expand_dims(lse, 0))
    ds = p * (dp - gl.expand_dims(delta, 0))
    return p.to(gl.bfloat16), ds.to(gl.bfloat16)


@gluon.jit
def _compute(dk_desc, sm, ds_s, dq_s, LSE, DELTA, qk_scale, steps, N1: gl.constexpr, WITH_DQ: gl.constexpr,
             STATS: gl.constexpr, SYNC: gl.constexpr, num_warps: gl.constexpr):
    """The 8 compute warps: the loop over query steps with dk, dv [BN, D] carried in registers."""
    k_s, v_s, q_s, do_s, qh_s, doh_s, st_s, r, kv, dq_full, dq_free = sm
    BN: gl.constexpr = k_s.shape[0]
    D: gl.constexpr = k_s.shape[1]
    BM: gl.constexpr = N0 + N1
    L0: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, N0, 16])
    NH: gl.constexpr = N1 if N1 > 0 else 16  # the hi chunk's width (unused when N1 = 0: the BM = 64 control)
    L1: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, NH, 16])
    KV: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, D, 16])
    A0: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=KV, k_width=2)
    dk = gl.zeros([BN, D], gl.float32, KV)
    dv = gl.zeros([BN, D], gl.float32, KV)
    mbarrier.wait(kv, 0)
    for i in range(steps):
        s = r.stage(i)
        r.wait_full(i)
        q0 = q_s.index(s)
        do0 = do_s.index(s)
        q1 = qh_s.index(s)
        do1 = doh_s.index(s)
        # SYNC 0 / 1: both chunks' S^T, dP^T waited at once (ws's staggered order, S^T waited first and P^T, dV
        # while dP^T runs, spilled more: 56-68 B at BM = 64, 240-312 B at 80); SYNC 2: chunk 1's after chunk 0's dV, dK
        s0 = warpgroup_mma(k_s, q0.permute((1, 0)), gl.zeros([BN, N0], gl.float32, L0), use_acc=False,
                           is_async=True)
        dp0 = warpgroup_mma(v_s, do0.permute((1, 0)), gl.zeros([BN, N0], gl.float32, L0), use_acc=False,
                            is_async=True)
        if N1 > 0 and SYNC < 2:
            s1 = warpgroup_mma(k_s, q1.permute((1, 0)), gl.zeros([BN, N1], gl.float32, L1), use_acc=False,
                               is_async=True)
            dp1 = warpgroup_mma(v_s, do1.permute((1, 0)), gl.zeros([BN, N1], gl.float32, L1), use_acc=False,
                                is_async=True)
            s0, dp0, s1, dp1 = warpgroup_mma_wait(num_outstanding=0, deps=(s0, dp0, s1, dp1))
        else:
            s0, dp0 = warpgroup_mma_wait(num_outstanding=0, deps=(s0, dp0))
        lse0, dl0 = _stats(st_s, LSE + i * BM, DELTA + i * BM, s, 0, N0, L0, STATS)
        p0, ds0 = _chunk(s0, dp0, lse0, dl0, qk_scale)
        dv = warpgroup_mma(gl.convert_layout(p0, A0), do0, dv, is_async=True)
        if WITH_DQ:
            ds_s[0].store(ds0)
        dk = warpgroup_mma(gl.convert_layout(ds0, A0), q0, dk, is_async=True)
        if N1 > 0:
            if SYNC >= 2:  # chunk 1's S^T, dP^T issued after chunk 0's dV, dK: never both chunks' scores live
                s1 = warpgroup_mma(k_s, q1.permute((1, 0)), gl.zeros([BN, N1], gl.float32, L1), use_acc=False,
                                   is_async=True)
                dp1 = warpgroup_mma(v_s, do1.permute((1, 0)), gl.zeros([BN, N1], gl.float32, L1), use_acc=False,
                                    is_async=True)
                dk, dv, s1, dp1 = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv, s1, dp1))
            lse1, dl1 = _stats(st_s, LSE + i * BM, DELTA + i * BM, s, N0, N1, L1, STATS)
            p1, ds1 = _chunk(s1, dp1, lse1, dl1, qk_scale)
            dv = warpgroup_mma(gl.convert_layout(p1, A0), do1, dv, is_async=True)
            if WITH_DQ and SYNC != 4:
                ds_s[1].store(ds1)
            dk = warpgroup_mma(gl.convert_layout(ds1, A0), q1, dk, is_async=True)
        if WITH_DQ:
            if SYNC >= 1:  # dK / dV's wgmmas done (their register A operands P^T, dS^T dead) before dQ^T's accumulators
                dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
            fence_async_shared()
            cta_barrier()
            if SYNC >= 3:  # one dQ^T chunk in registers at a time: each waited and stored before the next
                mbarrier.wait(dq_free, (i & 1) ^ 1)
                dq0 = warpgroup_mma(k_s.permute((1, 0)), ds_s[0], gl.zeros([D, N0], gl.float32, L0),
                                    use_acc=False, is_async=True)
                dq0 = warpgroup_mma_wait(num_outstanding=0, deps=(dq0,))
                dq_s[0].store(dq0)
                if N1 > 0 and SYNC == 3:
                    dq1 = warpgroup_mma(k_s.permute((1, 0)), ds_s[1], gl.zeros([D, N1], gl.float32, L1),
                                        use_acc=False, is_async=True)
                    dq1 = warpgroup_mma_wait(num_outstanding=0, deps=(dq1,))
                    dq_s[1].store(dq1)
                r.release(i)
            else:
                dq0 = warpgroup_mma(k_s.permute((1, 0)), ds_s[0], gl.zeros([D, N0], gl.float32, L0),
                                    use_acc=False, is_async=True)  # dQ^T [D, 64] = K^T dS^T
            if SYNC >= 3:
                pass
            elif N1 > 0:
                dq1 = warpgroup_mma(k_s.permute((1, 0)), ds_s[1], gl.zeros([D, N1], gl.float32, L1),
                                    use_acc=False, is_async=True)
                dk, dv, dq0, dq1 = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv, dq0, dq1))
            else:
                dk, dv, dq0 = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv, dq0))
            if SYNC < 3:
                r.release(i)
                mbarrier.wait(dq_free, (i & 1) ^ 1)  # the dQ warp stored the previous step's tiles
                dq_s[0].store(dq0)
                if N1 > 0:
                    dq_s[1].store(dq1)
            fence_async_shared()
            cta_barrier()
            mbarrier.arrive(dq_full, count=1)
        else:
            dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
            r.release(i)
    k_s.store(dk.to(gl.bfloat16))  # K / V are read for the last time above
    v_s.store(dv.to(gl.bfloat16))
    fence_async_shared()
    cta_barrier()
    tma_store(dk_desc, [0, 0], k_s)
    tma_store(dk_desc, [BN, 0], v_s)
    tma.store_wait(0)


@gluon.jit
def loop_probe(k_desc, v_desc, q_desc, qh_desc, dk_desc, dq_desc, dqh_desc, LSE, DELTA, qk_scale, steps,
               N1: gl.constexpr, WITH_DQ: gl.constexpr, STATS: gl.constexpr, SYNC: gl.constexpr,
               num_warps: gl.constexpr):
    """One key block (BN = 128 keys of K / V) over `steps` query blocks of BM = 64 + N1 rows; q_desc: [64, D]
    boxes of Q and dO, qh_desc: [N1, D] boxes; dq_desc / dqh_desc: dQ^T [D, Nq] fp32 with [D, 64] / [D, N1] boxes."""
    BN: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    NH: gl.constexpr = qh_desc.block_type.shape[0]  # N1 = 0: the BM = 64 control (hi tiles allocated, unused)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [BN, D], k_desc.layout)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [BN, D], k_desc.layout)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [2, N0, D], q_desc.layout)  # the 2-stage ring
    do_s = gl.allocate_shared_memory(gl.bfloat16, [2, N0, D], q_desc.layout)
    qh_s = gl.allocate_shared_memory(gl.bfloat16, [2, NH, D], qh_desc.layout)
    doh_s = gl.allocate_shared_memory(gl.bfloat16, [2, NH, D], qh_desc.layout)
    st_s = gl.allocate_shared_memory(gl.float32, [4, 128], gl.SwizzledSharedLayout(1, 1, 1, [0]))  # STATS = 1
    if True:  # allocated (unused) without dQ too: Gluon passes no None to a partition
        ds_s = (gl.allocate_shared_memory(gl.bfloat16, [BN, N0], gl.NVMMASharedLayout.get_default_for(
                    [BN, N0], gl.bfloat16)),
                gl.allocate_shared_memory(gl.bfloat16, [BN, NH], gl.NVMMASharedLayout.get_default_for(
                    [BN, NH], gl.bfloat16)))
        dq_s = (gl.allocate_shared_memory(gl.float32, [D, N0], dq_desc.layout),
                gl.allocate_shared_memory(gl.float32, [D, NH], dqh_desc.layout))
    r = ring(2)
    init_ring(r)
    bars = gl.allocate_shared_memory(gl.int64, [3, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(3):
        mbarrier.init(bars.index(b), count=1)
    fence_async_shared()
    sm = (k_s, v_s, q_s, do_s, qh_s, doh_s, st_s, r, bars.index(0), bars.index(1), bars.index(2))
    gl.warp_specialize([
        (_compute, (dk_desc, sm, ds_s, dq_s, LSE, DELTA, qk_scale, steps, N1, WITH_DQ, STATS, SYNC, num_warps)),
        (_loads, (q_desc, qh_desc, k_desc, v_desc, LSE, DELTA, sm, steps, N1, STATS)),
        (_dq_stores, (dq_desc, dqh_desc, dq_s, bars.index(1), bars.index(2), steps, N1, WITH_DQ)),
    ], [1, 1], [24, 24])


def fp32_desc(rows, cols, block):
    t = torch.empty(rows, cols, dtype=torch.float32)
    layout = gl.NVMMASharedLayout.get_default_for(list(block), gl.float32)
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(block), layout)


def loop_answer(n1, with_dq, stats, sync=0):
    import re
    from runners.compile.resources import ptxas_usage
    try:
        lse = torch.empty(4096, dtype=torch.float32)
        args = (desc(512, 128, [128, 128]), desc(512, 128, [128, 128]), desc(4096, 128, [64, 128]),
                desc(4096, 128, [n1 or 16, 128]), desc(512, 128, [128, 128]), fp32_desc(128, 4096, [128, 64]),
                fp32_desc(128, 4096, [128, n1 or 16]), lse, lse, 0.1, 40, n1, with_dq, stats, sync)
        compiled = compile_sm90(loop_probe, args, {"num_warps": 8})
        ptx = compiled.asm["ptx"]
        use = ptxas_usage(ptx)
        caps = sorted({int(m) for m in re.findall(r"setmaxnreg[.\w]*\s+(\d+)", ptx)})
        return (f"OK regs {use['n_regs']} (setmaxnreg {caps}), spills {use['spill_store_bytes']}/"
                f"{use['spill_load_bytes']} B, smem {compiled.metadata.shared} B, {wgmma_shapes(ptx)}")
    except Exception as exc:  # noqa: BLE001 - the error is the answer
        return one_line(exc)


CASES = [  # (question, N1, WITH_DQ, STATS[, SYNC])
    ("loop BM=64 control, dQ^T, LSE/delta from global", 0, True, 0),
    ("loop BM=64 control, dQ^T, LSE/delta from shared", 0, True, 1),
    ("loop BM=80 = 64 + 16, dQ^T, LSE/delta from global", 16, True, 0),
    ("loop BM=80 = 64 + 16, dQ^T, LSE/delta from shared", 16, True, 1),
    ("loop BM=80 = 64 + 16, no dQ, LSE/delta from global", 16, False, 0),
    ("loop BM=80 = 64 + 16, no dQ, LSE/delta from shared", 16, False, 1),
    ("loop BM=64 control, no dQ, LSE/delta from global", 0, False, 0),
    ("loop BM=96 = 64 + 32, dQ^T, LSE/delta from shared", 32, True, 1),
    ("loop BM=64 control, dQ^T, shared stats, dK/dV waited before dQ^T", 0, True, 1, 1),
    ("loop BM=80 = 64 + 16, dQ^T, shared stats, dK/dV waited before dQ^T", 16, True, 1, 1),
    ("loop BM=80 = 64 + 16, dQ^T, global stats, dK/dV waited before dQ^T", 16, True, 0, 1),
    ("loop BM=96 = 64 + 32, dQ^T, shared stats, dK/dV waited before dQ^T", 32, True, 1, 1),
    ("loop BM=80 = 64 + 16, dQ^T, shared stats, chunks in sequence", 16, True, 1, 2),
    ("loop BM=80 = 64 + 16, no dQ, shared stats, chunks in sequence", 16, False, 1, 2),
    ("loop BM=96 = 64 + 32, dQ^T, shared stats, chunks in sequence", 32, True, 1, 2),
    ("loop BM=64 control, dQ^T, shared stats, dQ^T chunks in sequence", 0, True, 1, 3),
    ("loop BM=80 = 64 + 16, dQ^T, shared stats, chunks + dQ^T chunks in sequence", 16, True, 1, 3),
    ("loop BM=80 = 64 + 16, dQ^T, global stats, chunks + dQ^T chunks in sequence", 16, True, 0, 3),
    ("loop BM=96 = 64 + 32, dQ^T, shared stats, chunks + dQ^T chunks in sequence", 32, True, 1, 3),
    ("loop BM=80 = 64 + 16, chunk 0's dQ^T only, shared stats, chunks in sequence", 16, True, 1, 4),
    ("loop BM=80 = 64 + 16, chunk 0's dQ^T only, global stats, chunks in sequence", 16, True, 0, 4),
]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(f"triton {triton.__version__}: ws D128 swap-AB loop, BN=128, 8+1+1 warps (sm90, not launched)", flush=True)
    only = [a for a in argv if a.startswith("--only=")]
    for question, *case in CASES:
        if not only or only[0][7:] in question:
            ask(question, lambda: ("text", loop_answer(*case), {}))
    also_under_36(argv, __file__, tuple(only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
