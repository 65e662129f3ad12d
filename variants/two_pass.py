"""two_pass: a dK/dV kernel and a dQ kernel, no atomics (FLA style)."""
from kernels.two_pass import two_pass_backward
from variants.base import TritonVariant
from variants.blocks import TwoPassBlocks
from variants.registry import register_variant


@register_variant("two_pass")
class TwoPass(TritonVariant):
    Blocks = TwoPassBlocks
    backward_matmuls = 7  # dK/dV kernel: S, dP, dV, dK; dQ kernel: S, dP, dQ (14 N^2 d)

    def default_blocks(self, problem):
        # each kernel's best in a per-kernel search on an H200, bf16, N=4096 (results/h200/NOTES.md)
        dkdv = dict(BLOCK_M1=64, BLOCK_N1=64, num_warps1=4, num_stages1=2)
        dq = dict(BLOCK_M2=128, BLOCK_N2=64, num_warps2=8, num_stages2=3)
        if problem.head_dim <= 64:
            if problem.causal:
                dq = dict(BLOCK_M2=64, BLOCK_N2=32, num_warps2=4, num_stages2=3)
            else:
                dkdv["num_stages1"] = 3
        elif problem.head_dim <= 128:
            if problem.causal:
                dkdv = dict(BLOCK_M1=32, BLOCK_N1=64, num_warps1=4, num_stages1=3)
                dq = dict(BLOCK_M2=64, BLOCK_N2=64, num_warps2=4, num_stages2=2)
        else:
            dkdv = dict(BLOCK_M1=32, BLOCK_N1=32, num_warps1=4, num_stages1=1)
            dq = dict(BLOCK_M2=32, BLOCK_N2=32, num_warps2=4, num_stages2=1)
        return TwoPassBlocks(**dkdv, **dq)

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks):
        return two_pass_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, **blocks.as_dict())
