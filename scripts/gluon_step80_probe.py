"""One ws D128 swap-AB step with BM = 80 (or 96) queries as 64 + 16 (+ 32) chunks: does it compile, and at what
registers / spills / shared memory? (issue 43, the 80-query tile of FA3/FA4; no GPU: compiled for sm90 only)

    python scripts/gluon_step80_probe.py            # the installed Triton
    python scripts/gluon_step80_probe.py --both     # and /work/venv36/bin/python (the GPU machines' Triton 3.6)

The kernel is the body of ws's `gradients` (kernels/gluon/mma.py) for one key block of BN = 128 keys and one query
block, 8 compute warps (two warpgroups, 64 keys each), written with the query dimension split into power-of-two
chunks N0 + N1 (Gluon refuses tensors, shared tiles and TMA boxes of 80 or 96 rows: scripts/gluon_tile_probe.py):
  S^T  = K Q^T, dP^T = V dO^T          [BN, N0] + [BN, N1] accumulators (wgmma n64 + n16)
  P^T  = exp2(S^T * scale - lse), dS^T = P^T (dP^T - delta)     (lse, delta: two slices)
  dV  += P^T dO, dK += dS^T Q           register A operands, K = N0 then K = N1, into one [BN, D] accumulator each
  dQ^T = K^T dS^T                        dQ swap AB (M = 80 is no wgmma M): [D, N0] + [D, N1], B = dS^T in shared
dQ^T goes to shared memory (the reduce-add's tile); dK, dV are stored at the end. N1 = 0 is ws's BM = 64 control
(with dQ swapped too, so the two differ only by the chunk). Results: results/h100/gluon/frontier_probe.md section 3.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gluon_tile_probe import also_under_36, ask, compile_sm90, desc, one_line, triton, wgmma_shapes  # noqa: E402
from gluon_tile_probe import gl, gluon, mbarrier, tma_load, warpgroup_mma, warpgroup_mma_wait  # noqa: E402
from gluon_tile_probe import fence_async_shared, tma, tma_store  # noqa: E402
import torch  # noqa: E402
from kernels.gluon.compat import cta_barrier  # noqa: E402


@gluon.jit
def _grad_chunk(s, dp, LSE, DELTA, lo: gl.constexpr, N: gl.constexpr, qk_scale, L: gl.constexpr):
    """P^T, dS^T [BN, N] of query columns [lo, lo + N) (bf16)."""
    cols = lo + gl.arange(0, N, layout=gl.SliceLayout(0, L))
    lse = gl.load(LSE + cols)
    delta = gl.load(DELTA + cols)
    p = gl.exp2(s * qk_scale - gl.expand_dims(lse, 0))
    ds = p * (dp - gl.expand_dims(delta, 0))
    return p.to(gl.bfloat16), ds.to(gl.bfloat16)


@gluon.jit
def step_probe(k_desc, v_desc, q_desc, dk_desc, LSE, DELTA, qk_scale, N0: gl.constexpr, N1: gl.constexpr,
               EXACT: gl.constexpr, num_warps: gl.constexpr):
    """One swap-AB step at BM = N0 + N1 (N1 = 0: BM = N0). q_desc: [N0 or 16, D] boxes of Q and dO. EXACT: Q and dO
    as [N0, D] + [N1, D] tiles, else in one [2 N0, D] tile (row slices)."""
    BN: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    BOX: gl.constexpr = q_desc.block_type.shape[0]
    BM: gl.constexpr = N0 + N1
    ROWS: gl.constexpr = N0 if N1 == 0 else 2 * N0  # power-of-two Q / dO tiles holding BM rows
    L0: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, N0, 16])
    KV: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, D, 16])
    A0: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=KV, k_width=2)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [BN, D], k_desc.layout)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [BN, D], k_desc.layout)
    if EXACT:  # BM rows exactly: a [N0, D] tile and a [N1, D] tile each (no padding to ROWS)
        q_s = gl.allocate_shared_memory(gl.bfloat16, [N0, D], k_desc.layout)
        do_s = gl.allocate_shared_memory(gl.bfloat16, [N0, D], k_desc.layout)
        q_hi = gl.allocate_shared_memory(gl.bfloat16, [N0 if N1 == 0 else N1, D], k_desc.layout)
        do_hi = gl.allocate_shared_memory(gl.bfloat16, [N0 if N1 == 0 else N1, D], k_desc.layout)
    else:
        q_s = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D], k_desc.layout)
        do_s = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D], k_desc.layout)
        q_hi = q_s if N1 == 0 else q_s.slice(N0, N1, 0)  # unused when N1 == 0
        do_hi = do_s if N1 == 0 else do_s.slice(N0, N1, 0)
    ds0_s = gl.allocate_shared_memory(gl.bfloat16, [BN, N0], gl.NVMMASharedLayout.get_default_for([BN, N0],
                                                                                                   gl.bfloat16))
    dq0_s = gl.allocate_shared_memory(gl.float32, [D, N0], gl.NVMMASharedLayout.get_default_for([D, N0], gl.float32))
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, 2 * k_desc.block_type.nbytes + 2 * (BM // BOX) * q_desc.block_type.nbytes)
    tma_load(k_desc, [0, 0], bar, k_s)
    tma_load(v_desc, [0, 0], bar, v_s)
    for i in gl.static_range(BM // BOX):
        if EXACT and i * BOX >= N0:
            tma_load(q_desc, [i * BOX, 0], bar, q_hi.slice(i * BOX - N0, BOX, 0))
            tma_load(q_desc, [i * BOX, 0], bar, do_hi.slice(i * BOX - N0, BOX, 0))
        else:
            tma_load(q_desc, [i * BOX, 0], bar, q_s.slice(i * BOX, BOX, 0))
            tma_load(q_desc, [i * BOX, 0], bar, do_s.slice(i * BOX, BOX, 0))
    mbarrier.wait(bar, phase=0)
    dk = gl.zeros([BN, D], gl.float32, KV)
    dv = gl.zeros([BN, D], gl.float32, KV)
    s0 = warpgroup_mma(k_s, q_s.slice(0, N0, 0).permute((1, 0)), gl.zeros([BN, N0], gl.float32, L0), use_acc=False,
                       is_async=True)
    dp0 = warpgroup_mma(v_s, do_s.slice(0, N0, 0).permute((1, 0)), gl.zeros([BN, N0], gl.float32, L0),
                        use_acc=False, is_async=True)
    if N1 > 0:
        L1: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                      instr_shape=[16, N1, 16])
        ds1_s = gl.allocate_shared_memory(gl.bfloat16, [BN, N1], gl.NVMMASharedLayout.get_default_for(
            [BN, N1], gl.bfloat16))
        dq1_s = gl.allocate_shared_memory(gl.float32, [D, N1], gl.NVMMASharedLayout.get_default_for([D, N1],
                                                                                                     gl.float32))
        s1 = warpgroup_mma(k_s, q_hi.permute((1, 0)), gl.zeros([BN, N1], gl.float32, L1),
                           use_acc=False, is_async=True)
        dp1 = warpgroup_mma(v_s, do_hi.permute((1, 0)), gl.zeros([BN, N1], gl.float32, L1),
                            use_acc=False, is_async=True)
        s0, dp0, s1, dp1 = warpgroup_mma_wait(num_outstanding=0, deps=(s0, dp0, s1, dp1))
        p0, ds0 = _grad_chunk(s0, dp0, LSE, DELTA, 0, N0, qk_scale, L0)
        p1, ds1 = _grad_chunk(s1, dp1, LSE, DELTA, N0, N1, qk_scale, L1)
        dv = warpgroup_mma(gl.convert_layout(p0, A0), do_s.slice(0, N0, 0), dv, is_async=True)
        dv = warpgroup_mma(gl.convert_layout(p1, A0), do_hi, dv, is_async=True)
        ds0_s.store(ds0)
        ds1_s.store(ds1)
        dk = warpgroup_mma(gl.convert_layout(ds0, A0), q_s.slice(0, N0, 0), dk, is_async=True)
        dk = warpgroup_mma(gl.convert_layout(ds1, A0), q_hi, dk, is_async=True)
        fence_async_shared()
        cta_barrier()
        dq0 = warpgroup_mma(k_s.permute((1, 0)), ds0_s, gl.zeros([D, N0], gl.float32, L0), use_acc=False,
                            is_async=True)  # dQ^T [D, N0] = K^T dS^T
        dq1 = warpgroup_mma(k_s.permute((1, 0)), ds1_s, gl.zeros([D, N1], gl.float32, L1), use_acc=False,
                            is_async=True)
        dk, dv, dq0, dq1 = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv, dq0, dq1))
        dq0_s.store(dq0)
        dq1_s.store(dq1)
    else:
        s0, dp0 = warpgroup_mma_wait(num_outstanding=0, deps=(s0, dp0))
        p0, ds0 = _grad_chunk(s0, dp0, LSE, DELTA, 0, N0, qk_scale, L0)
        dv = warpgroup_mma(gl.convert_layout(p0, A0), do_s.slice(0, N0, 0), dv, is_async=True)
        ds0_s.store(ds0)
        dk = warpgroup_mma(gl.convert_layout(ds0, A0), q_s.slice(0, N0, 0), dk, is_async=True)
        fence_async_shared()
        cta_barrier()
        dq0 = warpgroup_mma(k_s.permute((1, 0)), ds0_s, gl.zeros([D, N0], gl.float32, L0), use_acc=False,
                            is_async=True)
        dk, dv, dq0 = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv, dq0))
        dq0_s.store(dq0)
    fence_async_shared()
    k_s.store(dk.to(gl.bfloat16))
    v_s.store(dv.to(gl.bfloat16))
    fence_async_shared()
    cta_barrier()
    tma_store(dk_desc, [0, 0], k_s)
    tma_store(dk_desc, [BN, 0], v_s)
    tma.store_wait(0)


def step_answer(n0, n1, box, exact):
    from runners.compile.resources import ptxas_usage
    try:
        stats = torch.empty(256, dtype=torch.float32)
        compiled = compile_sm90(step_probe, (desc(512, 128, [128, 128]), desc(512, 128, [128, 128]),
                                             desc(512, 128, [box, 128]), desc(512, 128, [128, 128]), stats, stats,
                                             0.1, n0, n1, exact), {"num_warps": 8})
        ptx = compiled.asm["ptx"]
        use = ptxas_usage(ptx)
        return (f"OK regs {use['n_regs']}, spills {use['spill_store_bytes']}/{use['spill_load_bytes']} B, "
                f"smem {compiled.metadata.shared} B, {wgmma_shapes(ptx)}")
    except Exception as exc:  # noqa: BLE001 - the error is the answer
        return one_line(exc)


CASES = [
    ("BM=64 control (n64, dQ^T swapped), 8 warps", 64, 0, 64, False),
    ("BM=80 = 64 + 16, Q/dO in [128,D] tiles by [16,D] boxes", 64, 16, 16, False),
    ("BM=80 = 64 + 16, Q/dO as [64,D] + [16,D] tiles", 64, 16, 16, True),
    ("BM=96 = 64 + 32, Q/dO in [128,D] tiles by [32,D] boxes", 64, 32, 32, False),
    ("BM=96 = 64 + 32, Q/dO as [64,D] + [32,D] tiles", 64, 32, 32, True),
]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(f"triton {triton.__version__}: one D128 swap-AB step, BN=128, 8 warps (sm90, not launched)", flush=True)
    for question, n0, n1, box, exact in CASES:
        ask(question, lambda: ("text", step_answer(n0, n1, box, exact), {}))
    also_under_36(argv, __file__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
