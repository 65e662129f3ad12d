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
        # best of a small search on an H200, bf16, N=4096 (results/h200/NOTES.md)
        if problem.head_dim <= 64:
            return TwoPassBlocks(32, 128, 128, 32, num_warps=4, num_stages=3)
        if problem.head_dim <= 128:
            return TwoPassBlocks(64, 128, 128, 64, num_warps=8, num_stages=3)
        return TwoPassBlocks(32, 32, 32, 32, num_warps=4, num_stages=1)

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks):
        return two_pass_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, **blocks.as_dict())
