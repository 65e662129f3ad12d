"""ws_two_pass: ws's atomic-free twin in Gluon (issue 25), built the same way: ws's main kernel without dQ (K/V
resident, Q/dO through the TMA ring, 4 wgmma per step: S^T, dP^T, dV, dK) and a warp-specialized dQ kernel
(kernels/gluon/ws_dq.py: Q/dO resident, K/V through a TMA ring, 3 wgmma per step: S, dP, dQ with dS from
registers) that writes dq once: no fp32 accumulator, no reduce-adds, no conversion pass, bitwise reproducible.
sm90 only; it cannot run in the Triton interpreter."""
from variants.blocks import WsTwoPassBlocks
from variants.registry import register_variant
from variants.ws import Ws


@register_variant("ws_two_pass")
class WsTwoPass(Ws):
    Blocks = WsTwoPassBlocks
    # the smallest legal tiles, for the test matrix (tests/test_variants.py): short lengths span several blocks
    test_blocks = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, BLOCK_M2=64, BLOCK_N2=64, num_warps2=4,
                       num_stages2=2)

    def executed_flops(self, problem, blocks):
        return problem.matmul_flops(7, 3)  # dK/dV kernel: S, dP, dV, dK; dQ kernel: S, dP, dQ (dP, dV, dP over Dv)

    def workspace_bytes(self, problem, blocks):
        return 0  # dq written once in its own dtype

    supports_varlen = True
    modifiers = ()  # its dQ kernel (kernels/gluon/ws_dq.py) walks every key block: no window, softcap or gate yet

    def dq_workspace(self, q, blocks, varlen=None):
        return None  # dq written once by the dQ kernel: no accumulator

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks, varlen=None):
        from kernels.gluon.ws_dq import ws_two_pass_backward
        split = blocks.__dict__.get("_kernel_fields")  # read once per (frozen) instance: a plan's serve every call
        if split is None:
            dq_fields = {f"{name}2" for name in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")}
            split = ({name: value for name, value in blocks.as_dict().items() if name not in dq_fields},
                     blocks.dq_tile())
            object.__setattr__(blocks, "_kernel_fields", split)
        return ws_two_pass_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, dkdv_blocks=split[0],
                                    dq_blocks=split[1], varlen=varlen)
