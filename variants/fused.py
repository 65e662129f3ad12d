"""fused: dK/dV and dQ in one program, causal diagonal walked in slices (Triton-tutorial style)."""
from kernels.fused import fused_backward
from variants.base import TritonVariant
from variants.blocks import FusedBlocks
from variants.registry import register_variant


@register_variant("fused")
class Fused(TritonVariant):
    supports_varlen = True  # kernels take varlen= (a kernels.varlen.Packing)
    Blocks = FusedBlocks
    modifiers = ("window", "softcap", "gate")  # kernels take mods= and gate= (kernels/backward_steps.py)
    supports_sink = True  # the shared forward puts the sink in the LSE; the backward is unchanged, dsink beside it
    supports_head_dim_v = True  # kernels.backward_steps: V, dO, dV tiles by their own head dim (HEAD_DIM_V)
    backward_matmuls = 7  # dK/dV part: S, dP, dV, dK; dQ part: S, dP, dQ (14 N^2 d)

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks, varlen=None, mods=None, gate=None):
        return fused_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, varlen=varlen, mods=mods, gate=gate,
                              **blocks.as_dict())
