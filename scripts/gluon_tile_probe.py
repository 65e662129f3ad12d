"""Can Gluon express FA3/FA4's non-power-of-two Hopper backward tiles? (issue 43; no GPU: compile for sm90 only)

    python scripts/gluon_tile_probe.py            # the installed Triton
    python scripts/gluon_tile_probe.py --both     # and /work/venv36/bin/python (the GPU machines' Triton 3.6)

FA3 / FA4's sm90 backward runs 80 x 128 tiles at D128 (S^T = K Q^T so BM = 80 is the wgmma N; dQ swap-AB),
64 x 96 at D192 and 64 x 80 at D256. A wgmma's N may be any multiple of 8 up to 256 (PTX
`wgmma.mma_async.sync.aligned.m64nNk16`), but Gluon's register tensors have power-of-two shapes. Each question is
one tiny @gluon.jit kernel compiled (never launched) for sm90 through Triton's binder, as runners.compile_check
does; one line each: OK (with the wgmma shapes found in its PTX) or the compile error's one line.
Results and what they mean for ws: results/h100/gluon/frontier_probe.md.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile

os.environ["TRITON_INTERPRET"] = "0"  # Gluon compiles, never interprets
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # 3.9's default, without its warning

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,  # noqa: E402
                                                              warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared  # 3.9 / 3.6 names
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
VENV36 = "/work/venv36/bin/python"


def smem(shape, dtype=gl.bfloat16):
    return gl.NVMMASharedLayout.get_default_for(list(shape), dtype)


def acc_layout(n, warps=4):
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, n, 16])


def desc(rows, cols, block):
    t = torch.empty(rows, cols, dtype=torch.bfloat16)
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(block), smem(block))


# ---- the kernels: each keeps its result live (a scalar store), so nothing is dead-code eliminated ----------------

@gluon.jit
def blocked_zeros(out, M: gl.constexpr, N: gl.constexpr):
    """A register tensor [M, N] in a BlockedLayout."""
    lay: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])
    x = gl.full([M, N], 1.0, gl.float32, lay)
    gl.store(out, gl.sum(gl.sum(x, axis=1), axis=0))


@gluon.jit
def mma_n(out, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr, TENSOR_N: gl.constexpr, ACC: gl.constexpr,
          B_ROWS: gl.constexpr):
    """acc [M, TENSOR_N] (layout ACC) += A [M, K] @ B^T, B the first N rows of a [B_ROWS, K] shared tile."""
    a_s = gl.allocate_shared_memory(gl.bfloat16, [M, K], gl.NVMMASharedLayout.get_default_for([M, K], gl.bfloat16))
    b_all = gl.allocate_shared_memory(gl.bfloat16, [B_ROWS, K],
                                      gl.NVMMASharedLayout.get_default_for([B_ROWS, K], gl.bfloat16))
    b_s = b_all.slice(0, N, 0) if N != B_ROWS else b_all
    acc = warpgroup_mma(a_s, b_s.permute((1, 0)), gl.zeros([M, TENSOR_N], gl.float32, ACC), use_acc=False,
                        is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    gl.store(out, gl.sum(gl.sum(acc, axis=1), axis=0))


@gluon.jit
def mma_chunked(out, M: gl.constexpr, K: gl.constexpr, N0: gl.constexpr, N1: gl.constexpr):
    """A non-power-of-two N = N0 + N1 as two accumulators (a tuple of chunks, as tiles.head_dim_chunks does for D)."""
    a_s = gl.allocate_shared_memory(gl.bfloat16, [M, K], gl.NVMMASharedLayout.get_default_for([M, K], gl.bfloat16))
    b_s = gl.allocate_shared_memory(gl.bfloat16, [2 * N0, K],
                                    gl.NVMMASharedLayout.get_default_for([2 * N0, K], gl.bfloat16))
    L0: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N0, 16])
    L1: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N1, 16])
    c0 = warpgroup_mma(a_s, b_s.slice(0, N0, 0).permute((1, 0)), gl.zeros([M, N0], gl.float32, L0), use_acc=False,
                       is_async=True)
    c1 = warpgroup_mma(a_s, b_s.slice(N0, N1, 0).permute((1, 0)), gl.zeros([M, N1], gl.float32, L1), use_acc=False,
                       is_async=True)
    c0, c1 = warpgroup_mma_wait(num_outstanding=0, deps=(c0, c1))
    gl.store(out, gl.sum(gl.sum(c0, axis=1), axis=0) + gl.sum(gl.sum(c1, axis=1), axis=0))


@gluon.jit
def smem_alloc(out, R: gl.constexpr, C: gl.constexpr):
    """A shared tile [R, C] (NVMMA 128B swizzle), its first 64 rows the A operand of a 64 x 64 wgmma."""
    t = gl.allocate_shared_memory(gl.bfloat16, [R, C], gl.NVMMASharedLayout.get_default_for([R, C], gl.bfloat16))
    b_s = gl.allocate_shared_memory(gl.bfloat16, [64, C], gl.NVMMASharedLayout.get_default_for([64, C], gl.bfloat16))
    L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
    acc = warpgroup_mma(t.slice(0, 64, 0), b_s.permute((1, 0)), gl.zeros([64, 64], gl.float32, L), use_acc=False)
    gl.store(out, gl.sum(gl.sum(acc, axis=1), axis=0))


@gluon.jit
def tma_box(a_desc, out):
    """A TMA load of a_desc's box (maybe [80, 128]) into its shared tile, the first 64 rows then a wgmma A operand;
    and a TMA store of the box back."""
    R: gl.constexpr = a_desc.block_type.shape[0]
    C: gl.constexpr = a_desc.block_type.shape[1]
    t = gl.allocate_shared_memory(a_desc.dtype, [R, C], a_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, a_desc.block_type.nbytes)
    tma_load(a_desc, [0, 0], bar, t)
    mbarrier.wait(bar, phase=0)
    b_s = gl.allocate_shared_memory(gl.bfloat16, [64, C], gl.NVMMASharedLayout.get_default_for([64, C], gl.bfloat16))
    L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
    acc = warpgroup_mma(t.slice(0, 64, 0), b_s.permute((1, 0)), gl.zeros([64, 64], gl.float32, L), use_acc=False)
    gl.store(out, gl.sum(gl.sum(acc, axis=1), axis=0))
    fence_async_shared()
    tma_store(a_desc, [R, 0], t)
    tma.store_wait(0)


@gluon.jit
def swapped_scores(k_desc, q_desc, out, num_warps: gl.constexpr):
    """FA3's D128 tile: S^T = K Q^T [BN, BM] with BM = q_desc's rows (80) as the wgmma N, K [BN, D], Q [BM, D] by TMA."""
    BN: gl.constexpr = k_desc.block_type.shape[0]
    BM: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    k_s = gl.allocate_shared_memory(k_desc.dtype, [BN, D], k_desc.layout)
    q_s = gl.allocate_shared_memory(q_desc.dtype, [BM, D], q_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, k_desc.block_type.nbytes + q_desc.block_type.nbytes)
    tma_load(k_desc, [0, 0], bar, k_s)
    tma_load(q_desc, [0, 0], bar, q_s)
    mbarrier.wait(bar, phase=0)
    L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BM, 16])
    s_t = warpgroup_mma(k_s, q_s.permute((1, 0)), gl.zeros([BN, BM], gl.float32, L), use_acc=False)
    gl.store(out, gl.sum(gl.sum(s_t, axis=1), axis=0))


@gluon.jit
def swapped_scores_chunked(k_desc, q_desc, out, BM: gl.constexpr, N0: gl.constexpr, num_warps: gl.constexpr):
    """The same S^T [BN, BM] with BM = N0 + N1 (80 = 64 + 16) as two accumulators: Q's BM rows land in a
    power-of-two shared tile by TMA boxes of q_desc's rows (16: one box per 16 rows, two 128B-swizzle atoms), and
    the wgmma B operands are its row slices [0, N0) and [N0, BM)."""
    BN: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    BOX: gl.constexpr = q_desc.block_type.shape[0]
    N1: gl.constexpr = BM - N0
    ROWS: gl.constexpr = 2 * N0  # the power-of-two tile holding BM rows
    k_s = gl.allocate_shared_memory(k_desc.dtype, [BN, D], k_desc.layout)
    q_s = gl.allocate_shared_memory(q_desc.dtype, [ROWS, D], k_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, k_desc.block_type.nbytes + (BM // BOX) * q_desc.block_type.nbytes)
    tma_load(k_desc, [0, 0], bar, k_s)
    for i in gl.static_range(BM // BOX):
        tma_load(q_desc, [i * BOX, 0], bar, q_s.slice(i * BOX, BOX, 0))
    mbarrier.wait(bar, phase=0)
    L0: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, N0, 16])
    L1: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, N1, 16])
    s0 = warpgroup_mma(k_s, q_s.slice(0, N0, 0).permute((1, 0)), gl.zeros([BN, N0], gl.float32, L0), use_acc=False,
                       is_async=True)
    s1 = warpgroup_mma(k_s, q_s.slice(N0, N1, 0).permute((1, 0)), gl.zeros([BN, N1], gl.float32, L1), use_acc=False,
                       is_async=True)
    s0, s1 = warpgroup_mma_wait(num_outstanding=0, deps=(s0, s1))
    gl.store(out, gl.sum(gl.sum(s0, axis=1), axis=0) + gl.sum(gl.sum(s1, axis=1), axis=0))


@gluon.jit
def split_tiles(main_desc, rest_desc, out, num_warps: gl.constexpr):
    """Issue 43, D96 in tiles 96 columns wide: each tensor as two shared tiles, [R, 64] (128-byte swizzle) and [R, 32]
    (64-byte swizzle), each filled by its own TMA box of one [rows, 96] view (columns 0-63 and 64-95). S^T = K Q^T
    over K = 64 + 32 (both tiles as A and, transposed, as B), then dV's second chunk [R, 32] += P^T [R, R] (registers)
    @ dO [R, 32] (the narrow tile as a B operand of N = 32)."""
    R: gl.constexpr = main_desc.block_type.shape[0]
    MAIN: gl.constexpr = main_desc.block_type.shape[1]
    REST: gl.constexpr = rest_desc.block_type.shape[1]
    k_m = gl.allocate_shared_memory(main_desc.dtype, [R, MAIN], main_desc.layout)
    k_r = gl.allocate_shared_memory(rest_desc.dtype, [R, REST], rest_desc.layout)
    q_m = gl.allocate_shared_memory(main_desc.dtype, [R, MAIN], main_desc.layout)
    q_r = gl.allocate_shared_memory(rest_desc.dtype, [R, REST], rest_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, 2 * (main_desc.block_type.nbytes + rest_desc.block_type.nbytes))
    tma_load(main_desc, [0, 0], bar, k_m)
    tma_load(rest_desc, [0, MAIN], bar, k_r)
    tma_load(main_desc, [R, 0], bar, q_m)
    tma_load(rest_desc, [R, MAIN], bar, q_r)
    mbarrier.wait(bar, phase=0)
    L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, R, 16])
    L_R: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, REST, 16])
    s = warpgroup_mma(k_m, q_m.permute((1, 0)), gl.zeros([R, R], gl.float32, L), use_acc=False, is_async=True)
    s = warpgroup_mma(k_r, q_r.permute((1, 0)), s, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    p = gl.convert_layout(s.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=L_R, k_width=2))
    dv = warpgroup_mma(p, q_r, gl.zeros([R, REST], gl.float32, L_R), use_acc=False)
    gl.store(out, gl.sum(gl.sum(dv, axis=1), axis=0))


@gluon.jit
def bank_probe(out, REG: gl.constexpr, SH: gl.constexpr, M: gl.constexpr, N: gl.constexpr, F32: gl.constexpr):
    """The compiler's own bank-conflict count (Triton >= 3.9: gl.bank_conflicts) of storing a [M, N] register tensor
    in layout REG into a shared tile of layout SH, printed at trace time; the store and a load keep it compiled."""
    if F32:
        x = gl.zeros([M, N], gl.float32, REG)
    else:
        x = gl.zeros([M, N], gl.bfloat16, REG)
    t = gl.allocate_shared_memory(x.dtype, [M, N], SH)
    gl.static_print("BANK_CONFLICTS", gl.bank_conflicts(x.type, t.type))
    t.store(x)
    gl.store(out, gl.sum(gl.sum(t.load(REG).to(gl.float32), axis=1), axis=0))


# ---- compiling without a GPU ---------------------------------------------------------------------------------------

def compile_sm90(fn, args, kwargs):
    """The CompiledKernel for sm90 (Triton's binder, GluonASTSource), as runners.compile.resources.compile_kernel."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import create_function_from_signature
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound_args, specialization, options)
    return triton.compile(GluonASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)


def one_line(exc) -> str:
    """The informative line of a (multi-line) compile error."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    skip = re.compile(r"^(\^|~|at \d+:\d+:|\d+ *\||def |[A-Za-z_]+ = |The above exception)")
    useful = [ln for ln in lines if not skip.match(ln)]
    text = useful[-1] if useful else (lines[-1] if lines else "")
    return f"{type(exc).__name__}: {text}"[:220]


def wgmma_shapes(ptx: str) -> str:
    shapes = sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)),
                    key=lambda s: int(s[4:-3]))
    extra = []
    if "cp.async.bulk.tensor" in ptx:
        extra.append("TMA")
    if "stmatrix" in ptx:
        extra.append("stmatrix")
    return "wgmma " + ",".join(shapes) + (" " + " ".join(extra) if extra else "") if shapes else "no wgmma"


def answer(make) -> str:
    try:
        fn, args, kwargs = make()
        if fn == "text":  # an answer computed by make() itself
            return args
        compiled = compile_sm90(fn, args, kwargs)
        return f"OK ({wgmma_shapes(compiled.asm['ptx'])}, {compiled.metadata.shared} B shared)"
    except Exception as exc:  # noqa: BLE001 - the error is the answer
        return one_line(exc)


def ask(question, make):
    """Compile make()'s (fn, args, kwargs) in a forked child (a failed C++ assertion in the compiler aborts the
    process) and print one line."""
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: its stderr (an assertion's message) into err, its answer into the pipe
            os.close(read_end)
            os.dup2(err.fileno(), 2)
            text = answer(make)
            os.write(write_end, text.encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            text = pipe.read().decode()
        _, status = os.waitpid(pid, 0)
        if not text:
            err.seek(0)
            lines = [ln.strip() for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
            why = next((ln for ln in lines if "Assertion" in ln or "error" in ln.lower()), lines[-1] if lines else "")
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            name = signal.Signals(sig).name if sig else f"exit {os.WEXITSTATUS(status)}"
            text = f"compiler crashed ({name}): {re.sub(r'^.*?/lib/', 'lib/', why)}"[:220]
    print(f"  {question:<58} {text}", flush=True)


def out():
    return torch.empty(1, dtype=torch.float32)


QUESTIONS = [
    ("register tensor [64, 96] (BlockedLayout)", lambda: (blocked_zeros, (out(), 64, 96), {})),
    ("register tensor [64, 128] (BlockedLayout, control)", lambda: (blocked_zeros, (out(), 64, 128), {})),
    ("wgmma N=128: acc [64,128] instr [16,128,16] (control)",
     lambda: (mma_n, (out(), 64, 128, 64, 128, acc_layout(128), 128), {})),
    ("wgmma N=96: acc [64,96] instr [16,96,16]", lambda: (mma_n, (out(), 64, 96, 64, 96, acc_layout(96), 128), {})),
    ("wgmma N=80: acc [64,80] instr [16,80,16]", lambda: (mma_n, (out(), 64, 80, 64, 80, acc_layout(80), 128), {})),
    ("wgmma N=96 in a [64,128] acc, instr [16,96,16]",
     lambda: (mma_n, (out(), 64, 128, 64, 128, acc_layout(96), 128), {})),
    ("N=96 as chunks 64 + 32 (two accumulators)", lambda: (mma_chunked, (out(), 64, 64, 64, 32), {})),
    ("N=80 as chunks 64 + 16 (two accumulators)", lambda: (mma_chunked, (out(), 64, 64, 64, 16), {})),
    ("shared tile [80, 128] bf16 (alloc, rows 0-63 as A)", lambda: (smem_alloc, (out(), 80, 128), {})),
    ("shared tile [96, 128] bf16 (alloc, rows 0-63 as A)", lambda: (smem_alloc, (out(), 96, 128), {})),
    ("TMA box [80, 128] (host descriptor, load + store)", lambda: (tma_box, (desc(512, 128, [80, 128]), out()), {})),
    ("TMA box [96, 128] (host descriptor, load + store)", lambda: (tma_box, (desc(512, 128, [96, 128]), out()), {})),
    ("swapped S^T = K Q^T: K [128,128], Q [80,128], N=80",
     lambda: (swapped_scores, (desc(512, 128, [128, 128]), desc(512, 128, [80, 128]), out()), {"num_warps": 8})),
    ("swapped S^T = K Q^T: K [128,64], Q [96,64], N=96",
     lambda: (swapped_scores, (desc(512, 64, [128, 64]), desc(512, 64, [96, 64]), out()), {"num_warps": 8})),
    ("swapped S^T, BM=80 = 64 + 16, Q by five [16,128] boxes",
     lambda: (swapped_scores_chunked, (desc(512, 128, [128, 128]), desc(512, 128, [16, 128]), out(), 80, 64),
              {"num_warps": 8})),
    ("swapped S^T, BM=96 = 64 + 32, Q by three [32,64] boxes",
     lambda: (swapped_scores_chunked, (desc(512, 64, [128, 64]), desc(512, 64, [32, 64]), out(), 96, 64),
              {"num_warps": 8})),
    ("D96 tiles as [64,64] + [64,32] by two TMA boxes, K = 64 + 32",
     lambda: (split_tiles, (desc(512, 96, [64, 64]), desc(512, 96, [64, 32]), out()), {"num_warps": 4})),
    ("D96 tiles as [128,64] + [128,32], 8 warps",
     lambda: (split_tiles, (desc(512, 96, [128, 64]), desc(512, 96, [128, 32]), out()), {"num_warps": 8})),
]


def spread_rows_layout(warp_bases, shape):
    """The dQ tile's register layout after ws's `_bank_spread_rows` (as the TTGIR shows it: a wgmma accumulator
    with lane bits 2 and 4 of the row swapped)."""
    return gl.DistributedLinearLayout(reg_bases=[[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]],
                                      lane_bases=[[0, 2], [0, 4], [2, 0], [4, 0], [1, 0]], warp_bases=warp_bases,
                                      block_bases=[], shape=shape)


def nvmma(bits, swizzle=128, transposed=False):
    return gl.NVMMASharedLayout(swizzle_byte_width=swizzle, element_bitwidth=bits, rank=2, transposed=transposed)


def ws_stores():
    """ws's register -> shared stores at its default sm90 tiles, as its TTGIR has them (8 compute warps):
    (what, register layout, shared layout, rows, cols, fp32), and candidate layouts beside them."""
    return [
        ("D64  P, dS [128,128] bf16 <- mma[8,1] n128 (swz128)", acc_layout(128, 8), nvmma(16), 128, 128, False),
        ("D64  P, dS, 64B swizzle instead", acc_layout(128, 8), nvmma(16, 64), 128, 128, False),
        ("D64  P, dS, transposed (MN-major) 128B", acc_layout(128, 8), nvmma(16, 128, True), 128, 128, False),
        ("D64  dQ [128,64] f32 <- rows spread (swz128)", spread_rows_layout([[16, 0], [32, 0], [64, 0]], [128, 64]),
         nvmma(32), 128, 64, True),
        ("D64  dQ [128,64] f32 <- mma[8,1] n64, not spread", acc_layout(64, 8), nvmma(32), 128, 64, True),
        ("D128 dS^T [128,64] bf16 <- mma[8,1] n64 (swz128)", acc_layout(64, 8), nvmma(16), 128, 64, False),
        ("D128 dQ [64,128] f32 <- rows spread (swz128)", spread_rows_layout([[16, 0], [32, 0], [0, 64]], [64, 128]),
         nvmma(32), 64, 128, True),
        ("D128 dQ [64,128] f32 <- mma[4,2] n64, not spread",
         gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, 64, 16]), nvmma(32), 64,
         128, True),
    ]


def store_ops(ptx: str) -> str:
    ops = sorted(set(re.findall(r"(stmatrix[.a-z0-9]*|st\.shared[.a-z0-9]*)", ptx)) - {"st.shared.b32"})
    return ",".join(op.replace(".sync.aligned", "").replace(".shared", "") for op in ops)


def bank_answer(reg, shared, rows, cols, fp32) -> str:
    import contextlib
    import io
    buf = io.StringIO()
    triton.knobs.compilation.always_compile = True  # a cached kernel is not traced: no count printed
    try:
        with contextlib.redirect_stdout(buf):
            compiled = compile_sm90(bank_probe, (out(), reg, shared, rows, cols, fp32), {"num_warps": 8})
        count = re.search(r"BANK_CONFLICTS\s+(\S+)", buf.getvalue())
        return f"{count.group(1) if count else '?'} ({store_ops(compiled.asm['ptx'])})"
    except Exception as exc:  # noqa: BLE001
        return one_line(exc)


def also_under_36(argv, script: str, extra: tuple = ()) -> None:
    """With --both, under any other Triton: the same probe `script` (with `extra` arguments) again under the GPU
    machines' Triton 3.6."""
    if "--both" in argv and os.path.exists(VENV36) and triton.__version__ != "3.6.0":
        sys.stdout.flush()
        subprocess.run([VENV36, os.path.abspath(script), *extra], check=False)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(f"triton {triton.__version__} (compiled for sm90, not launched)", flush=True)
    for question, make in QUESTIONS:
        ask(question, make)
    if hasattr(gl, "bank_conflicts"):
        print("compiler's bank-conflict count of ws's register -> shared stores (gl.bank_conflicts; the store op):")
        for what, reg, shared, rows, cols, fp32 in ws_stores():
            ask(what, lambda: ("text", bank_answer(reg, shared, rows, cols, fp32), {}))
    else:
        print("(no gl.bank_conflicts in this Triton: the ws store table needs 3.9)")
    also_under_36(argv, __file__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
