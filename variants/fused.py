"""fused: dK/dV and dQ in one program, causal diagonal walked in slices (Triton-tutorial style)."""
from kernels.fused import fused_backward
from variants.base import TritonVariant
from variants.blocks import FusedBlocks
from variants.registry import register_variant


@register_variant("fused")
class Fused(TritonVariant):
    Blocks = FusedBlocks
    backward_matmuls = 7  # dK/dV part: S, dP, dV, dK; dQ part: S, dP, dQ (14 N^2 d)

    def default_blocks(self, problem):
        # best of a small search on an H200, bf16, N=4096 (results/h200/NOTES.md)
        if problem.head_dim <= 64:
            return FusedBlocks(32, 128, 128, 32, BLK_SLICE_FACTOR=2, num_warps=4, num_stages=3)
        if problem.head_dim <= 128 and not problem.causal:
            return FusedBlocks(64, 64, 64, 64, BLK_SLICE_FACTOR=2, num_warps=4, num_stages=2)
        if problem.head_dim <= 128:
            return FusedBlocks(64, 128, 128, 64, BLK_SLICE_FACTOR=2, num_warps=8, num_stages=2)
        return FusedBlocks(32, 32, 32, 32, BLK_SLICE_FACTOR=1, num_warps=4, num_stages=1)

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks):
        return fused_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, **blocks.as_dict())
