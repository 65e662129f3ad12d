"""atomic_tma: FA3-style single kernel, dQ accumulated by TMA reduce-add of fp32 tiles (sm90)."""
import torch

from kernels.atomic_tma import atomic_tma_backward
from kernels.common import head_block
from variants.base import TritonVariant
from variants.blocks import AtomicTmaBlocks
from variants.registry import register_variant


@register_variant("atomic_tma")
class AtomicTma(TritonVariant):
    supports_varlen = True  # kernels take varlen= (a kernels.varlen.Packing); every mode runs packed
    Blocks = AtomicTmaBlocks
    modifiers = ("window", "softcap", "gate")  # the shared mask / modifier helpers (kernels/atomic_tma.py)
    supports_sink = True  # the shared forward puts the sink in the LSE; the backward is unchanged, dsink beside it
    tma_min_arch = 90  # tensor descriptors (TMA loads, the dQ reduce-add) from sm90 on (kernels/atomic_tma.tma_paths)

    def arch_reason(self, capability, blocks=None):
        """tma_load / tma_reduce request TMA, which sm8x has not: there the wrapper would run its fallback, a
        different kernel than the blocks ask for (check it with tma_load=false,tma_reduce=false)."""
        wants = [name for name in ("tma_load", "tma_reduce") if blocks is not None and getattr(blocks, name)
                 and not (name == "tma_reduce" and blocks.deterministic)]
        if capability < self.tma_min_arch and wants:
            return (f"{'/'.join(wants)} need TMA (tensor descriptors, sm{self.tma_min_arch}+); on sm{capability} the "
                    f"wrapper falls back to pointer loads and atomics (blocks tma_load=false,tma_reduce=false)")
        return super().arch_reason(capability, blocks)

    def executed_flops(self, problem, blocks):
        # S, dP, dV, dK, dQ (10 N^2 d); deterministic mode recomputes S and dP in its dQ pass (14 N^2 d)
        return problem.matmul_flops(7 if blocks.deterministic else 5)

    def workspace_bytes(self, problem, blocks):
        if blocks.deterministic:
            return 0
        # fp32 dQ accumulator [B, H, Nq, head_block(D)] (packed: [1, H, total_q, head_block(D)])
        return 4 * problem.tokens_q * problem.heads * head_block(problem.head_dim)

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks, varlen=None, mods=None,
                     gate=None, dq_acc=None):
        return atomic_tma_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, varlen=varlen, mods=mods,
                                   gate=gate, dq_acc=dq_acc, **blocks.as_dict())

    def dq_workspace(self, q, blocks, varlen=None):
        """The fp32 dQ accumulator [B, H, Nq, head_block(D)] (packed: [1, H, total_q, ...]); none when deterministic."""
        if blocks.deterministic:
            return None
        batch, seq_q, heads, head_dim = q.shape
        return torch.empty(batch, heads, seq_q, head_block(head_dim), device=q.device, dtype=torch.float32)
