"""atomic_tma: FA3-style single kernel, dQ accumulated by TMA reduce-add of fp32 tiles (sm90)."""
from kernels.atomic_tma import atomic_tma_backward
from kernels.common import head_block
from variants.base import TritonVariant
from variants.blocks import AtomicTmaBlocks
from variants.registry import register_variant


@register_variant("atomic_tma")
class AtomicTma(TritonVariant):
    supports_varlen = True  # kernels take varlen= (a kernels.varlen.Packing); every mode runs packed
    Blocks = AtomicTmaBlocks

    def executed_flops(self, problem, blocks):
        # S, dP, dV, dK, dQ (10 N^2 d); deterministic mode recomputes S and dP in its dQ pass (14 N^2 d)
        return problem.matmul_flops(7 if blocks.deterministic else 5)

    def workspace_bytes(self, problem, blocks):
        if blocks.deterministic:
            return 0
        # fp32 dQ accumulator [B, H, Nq, head_block(D)] (packed: [1, H, total_q, head_block(D)])
        return 4 * problem.tokens_q * problem.heads * head_block(problem.head_dim)

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks, varlen=None):
        return atomic_tma_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, varlen=varlen,
                                   **blocks.as_dict())
