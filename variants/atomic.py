"""atomic: one kernel over K/V blocks, dQ accumulated with fp32 atomics (FA2 CUDA style)."""
import torch

from kernels.atomic import atomic_backward
from variants.base import TritonVariant
from variants.blocks import AtomicBlocks
from variants.registry import register_variant


@register_variant("atomic")
class Atomic(TritonVariant):
    supports_varlen = True  # kernels take varlen= (a kernels.varlen.Packing)
    Blocks = AtomicBlocks
    modifiers = ("window", "softcap", "gate")  # the shared steps (kernels/backward_steps.py); gate: kernels/atomic.py
    supports_sink = True  # the shared forward puts the sink in the LSE; the backward is unchanged, dsink beside it
    supports_head_dim_v = True  # kernels.backward_steps: V, dO, dV tiles by their own head dim (HEAD_DIM_V)

    def executed_flops(self, problem, blocks):
        # S, dP, dV, dK, dQ (10 N^2 d); deterministic mode recomputes S and dP in its dQ pass (14 N^2 d)
        return problem.matmul_flops(7, 3) if blocks.deterministic else problem.matmul_flops(5, 2)

    def workspace_bytes(self, problem, blocks):
        if blocks.deterministic:
            return 0
        return 4 * problem.tokens_q * problem.heads * problem.head_dim  # fp32 dQ accumulator

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks, varlen=None, mods=None, gate=None,
                     dq_acc=None):
        return atomic_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, varlen=varlen, mods=mods, gate=gate,
                               dq_acc=dq_acc, **blocks.as_dict())

    def dq_workspace(self, q, blocks, varlen=None):
        """The atomics' fp32 dQ accumulator, like q ([B, Nq, H, D] in q's memory layout); none when deterministic."""
        return None if blocks.deterministic else torch.empty_like(q, dtype=torch.float32)
