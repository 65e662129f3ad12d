"""Issue 43's question, on the CPU: can a Gluon wgmma take a tile whose N is not a power of two (FA4's 80- and 96-key
tiles at D128 non-causal and D192), on Triton 3.9 and 3.6? Compiles one warpgroup's [64, 64] @ [64, N] for sm90 with
N = 64, 80, 96, 128: from shared memory allocated [64, N], and as a [64, N] slice of a [64, 128] allocation.

    python scripts/npot_wgmma_probe.py            # and /work/venv36/bin/python for Triton 3.6

Answer on both (2026-11-27): 64 and 128 compile; 80 and 96 fail at the shared allocation and at the slice alike
("shape must have power-of-2 and non-zero dimensions"), before any register tensor is built. A 96-key tile in Gluon
is then two products per step, 64 + 32 keys, as ws already runs non-power-of-two head dims (`head_dim_chunks`)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernels.gluon.compat import gl, gluon, warpgroup_mma  # noqa: E402
from runners.compile.resources import compile_kernel, ptxas_usage  # noqa: E402


@gluon.jit
def _product(x_ptr, N: gl.constexpr, SLICED: gl.constexpr):
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, N, 16])
    a_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    b_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2,
                                                  transposed=True)
    a = gl.allocate_shared_memory(gl.bfloat16, [64, 64], a_layout)  # [64, 64]
    if SLICED:
        b = gl.allocate_shared_memory(gl.bfloat16, [64, 128], b_layout).slice(0, N, dim=1)  # [64, N]
    else:
        b = gl.allocate_shared_memory(gl.bfloat16, [64, N], b_layout)  # [64, N]
    acc = warpgroup_mma(a, b, gl.zeros([64, N], gl.float32, acc_layout))  # [64, N]
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, acc_layout))
    gl.store(x_ptr + rows, gl.sum(acc, axis=1))


def main() -> None:
    import triton
    out = torch.empty(64, dtype=torch.float32)
    print(f"Triton {triton.__version__}")
    for sliced in (False, True):
        for n in (64, 80, 96, 128):
            try:
                usage = ptxas_usage(compile_kernel(_product, (out, n, sliced), {"num_warps": 4}).asm["ptx"])
                verdict = f"ok, {usage['n_regs']} registers"
            except Exception as exc:  # noqa: BLE001 - the compiler's message is the answer
                verdict = "fails: " + next((line for line in str(exc).splitlines() if "power-of-2" in line),
                                           type(exc).__name__)
            print(f"N={n:3d} {'slice of [64, 128]' if sliced else 'allocated [64, N]':18s} {verdict}")


if __name__ == "__main__":
    main()
