"""two_pass: a dK/dV kernel and a dQ kernel, no atomics (FLA style)."""
from kernels.two_pass import two_pass_backward
from variants.base import TritonVariant
from variants.blocks import TwoPassBlocks
from variants.registry import register_variant


@register_variant("two_pass")
class TwoPass(TritonVariant):
    supports_varlen = True  # kernels take varlen= (a kernels.varlen.Packing)
    modifiers = ("window", "softcap", "gate")  # kernels take mods= and gate= (kernels/backward_steps.py)
    supports_sink = True  # the shared forward puts the sink in the LSE; the backward is unchanged, dsink beside it
    supports_head_dim_v = True  # kernels.backward_steps: V, dO, dV tiles by their own head dim (HEAD_DIM_V)
    Blocks = TwoPassBlocks
    backward_matmuls = 7  # dK/dV kernel: S, dP, dV, dK; dQ kernel: S, dP, dQ (14 N^2 d)

    def executed_flops(self, problem, blocks):
        # split_dkdv recomputes S in the dK pass: 8 matmuls (16 N^2 d); split_d changes no FLOP
        return problem.matmul_flops(self.backward_matmuls + (1 if blocks.split_dkdv else 0), 3)  # split: S once more

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks, varlen=None, mods=None, gate=None):
        return two_pass_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, varlen=varlen, mods=mods,
                                 gate=gate, **blocks.as_dict())
