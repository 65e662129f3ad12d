"""Compiled resources of the Gluon forward (kernels/gluon/forward.py, issue 42) for sm90, on a machine without a GPU:

    python -m runners.compile_check --forward gluon --head-dim 128 --causal [--dtype fp16] [--blocks BLOCK_N=64,...]

The forward runs once on a small CPU problem with `JITFunction.run` replaced by a recorder (nothing executes; the
sm90 check of `forward_reason` is skipped), and the recorded launch is compiled the way runners.compile.resources
compiles a backward's: Triton's binder, `triton.compile` for sm90, the bundled ptxas for registers and spills, and
the CUDA launcher's argument expansion (Triton 3.6 takes TMA descriptors only as top-level arguments).
"""
from runners.compile.arch_limits import ARCHS, DEFAULT_ARCH, ArchLimits
from runners.compile.resources import format_row, kernel_row, use_compiler_not_interpreter

FORWARD_KERNEL = "_gluon_fwd_kernel"


def capture_forward_launch(head_dim: int, causal: bool, dtype_name: str, blocks: dict | None = None,
                           heads: int = 4, kv_heads: int = 2, mods=None, documents: tuple | None = None):
    """(FwdBlocks, (JITFunction, args, kwargs)) of one Gluon forward on CPU tensors, nothing executed. The lengths
    are not multiples of the tiles (300 queries, 333 keys), as a launch with tails has them. mods: a window / softcap
    (variants.problem.Modifiers, or its fields (left, right, softcap) as a tuple) or None; documents: (query lengths,
    key lengths) of a packed batch (q [1, total, H, D], kernels.varlen.Packing) or None."""
    use_compiler_not_interpreter()
    import torch
    from triton.runtime.jit import JITFunction

    from kernels.gluon.forward import check_forward_blocks, default_forward_blocks, gluon_attention_forward
    from kernels.varlen import Packing
    from variants.problem import DTYPES, Modifiers

    if isinstance(mods, tuple):  # imported here, after the compiler's environment is set (not the interpreter)
        mods = Modifiers(*mods)
    tile = default_forward_blocks(head_dim, causal)._replace(**(blocks or {}))
    check_forward_blocks(tile)
    dtype = DTYPES[dtype_name]
    q = torch.randn(2, 300, heads, head_dim, dtype=dtype)
    k, v = (torch.randn(2, 333, kv_heads, head_dim, dtype=dtype) for _ in range(2))
    packing = None
    if documents:
        lens_q, lens_k = documents
        packing = Packing(*(torch.tensor([0, *lens]).cumsum(0).to(torch.int32) for lens in (lens_q, lens_k)))
        q = torch.randn(1, sum(lens_q), heads, head_dim, dtype=dtype)
        k, v = (torch.randn(1, sum(lens_k), kv_heads, head_dim, dtype=dtype) for _ in range(2))
    launches, original = [], JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs))

    JITFunction.run = record
    try:
        gluon_attention_forward(q, k, v, causal, head_dim ** -0.5, tile, mods, packing)
    finally:
        JITFunction.run = original
    return tile, launches[0]


def check_forward_kernel(head_dim: int, causal: bool, dtype_name: str = "bf16", blocks: dict | None = None,
                         arch: ArchLimits = ARCHS[DEFAULT_ARCH], window_softcap: tuple | None = None,
                         documents: tuple | None = None) -> dict:
    """One row: the forward's tile, registers, spills, shared memory, programs per SM and status on `arch`
    (runners.compile.resources.kernel_row's columns). window_softcap: (window left, window right, softcap) or None;
    documents: (query lengths, key lengths) of a packed batch or None."""
    tile, (fn, args, kwargs) = capture_forward_launch(head_dim, causal, dtype_name, blocks, mods=window_softcap,
                                                      documents=documents)
    row = {"arch": arch.name, "forward": "gluon", "head_dim": head_dim, "dtype": dtype_name, "causal": causal,
           "blocks": dict(tile._asdict())}
    if arch.capability != 90:
        return {**row, "kernel": fn.__name__, "status": f"unsupported: the Gluon forward needs sm90; this is {arch.name}"}
    return {**row, **kernel_row(fn, args, kwargs, arch)}


def format_forward_row(row: dict) -> str:
    head = (f"gluon forward D{row['head_dim']} {row['dtype']}{' causal' if row['causal'] else ''} {row['arch']}  "
            f"{row['blocks']}")
    filled = {"n_regs": None, **row, "num_warps": row["blocks"]["num_warps"],
              "num_stages": row["blocks"]["num_stages"]}  # the K/V ring's stages (the kernel has no pipeliner)
    return f"{head}\n  {format_row(filled)}"
