"""ws_two_pass: ws's atomic-free twin in Gluon (issue 25), built the same way: ws's main kernel without dQ (K/V
resident, Q/dO through the TMA ring, 4 wgmma per step: S^T, dP^T, dV, dK) and a warp-specialized dQ kernel
(kernels/gluon/ws_dq.py: Q/dO resident, K/V through a TMA ring, 3 wgmma per step: S, dP, dQ with dS from
registers) that writes dq once: no fp32 accumulator, no reduce-adds, no conversion pass, bitwise reproducible.
sm90 only; it cannot run in the Triton interpreter."""
from dataclasses import dataclass

from variants.blocks import BOOLS, WARPS, Blocks, check_key_block, tunable
from variants.registry import register_variant
from variants.ws import Ws

DKDV_KERNEL = "_ws_backward_kernel"  # the two kernels, as a row's kernel_ms names them
DQ_KERNEL = "_ws_dq_kernel"


@dataclass(frozen=True)
class WsTwoPassBlocks(Blocks):
    """dK/dV kernel (ws's, without dQ): BLOCK_M, BLOCK_N, num_warps, num_stages, swap_ab, persistent, longest_first;
    dQ kernel: BLOCK_M2 (resident query block), BLOCK_N2 (key block walked), num_warps2, num_stages2."""
    BLOCK_M: int = tunable(64, (64, 128), DKDV_KERNEL)
    BLOCK_N: int = tunable(128, (64, 128), DKDV_KERNEL)
    num_warps: int = tunable(8, WARPS, DKDV_KERNEL)
    num_stages: int = tunable(2, (2, 3), DKDV_KERNEL)
    swap_ab: bool = tunable(True, BOOLS, DKDV_KERNEL)
    longest_first: bool = True
    persistent: bool = tunable(False, BOOLS, DKDV_KERNEL)
    BLOCK_M2: int = tunable(128, (64, 128), DQ_KERNEL)
    BLOCK_N2: int = tunable(64, (64, 128), DQ_KERNEL)
    num_warps2: int = tunable(8, WARPS, DQ_KERNEL)
    num_stages2: int = tunable(2, (2, 3), DQ_KERNEL)

    def check_rules(self) -> None:
        for warps, name in ((self.num_warps, "num_warps"), (self.num_warps2, "num_warps2")):
            if warps not in WARPS:
                raise ValueError(f"{name}={warps}: must be 4 or 8 (whole warpgroups)")
        if self.BLOCK_M < 64:
            raise ValueError(f"BLOCK_M={self.BLOCK_M}: must be >= 64 (a 64-row warpgroup tile)")
        check_key_block(self.BLOCK_N, self.num_warps, self.swap_ab)
        if self.BLOCK_M2 % (16 * self.num_warps2):
            raise ValueError(f"BLOCK_M2={self.BLOCK_M2}: must be a multiple of 16 x num_warps2 "
                             f"({16 * self.num_warps2}): dQ rows are split over the warps")
        if self.num_stages < 2 or self.num_stages2 < 2:
            raise ValueError("num_stages, num_stages2: must be >= 2 (TMA rings)")

    def dq_tile(self) -> dict:
        """The dQ kernel's fields under `ws_dq`'s names."""
        return dict(BLOCK_M=self.BLOCK_M2, BLOCK_N=self.BLOCK_N2, num_warps=self.num_warps2,
                    num_stages=self.num_stages2)

    @classmethod
    def dq_tile_for(cls, head_dim: int) -> dict:
        """The dQ kernel's default tile for a head dim (ws's deterministic mode), as ws_two_pass's rules give it
        (conf/block_defaults.yaml): the dataclass's up to D128; past it (tiles of 256 columns) 128 x 32 on two
        warpgroups at D192, 64 x 64 on one at D256, so Q, dO and a 2-stage K / V ring fit shared memory."""
        if head_dim <= 128:
            return cls().dq_tile()
        if head_dim <= 192:
            return dict(BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=2)
        return dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)


@register_variant("ws_two_pass")
class WsTwoPass(Ws):
    Blocks = WsTwoPassBlocks
    # the smallest legal tiles, for the test matrix (tests/test_variants.py): short lengths span several blocks
    test_blocks = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, BLOCK_M2=64, BLOCK_N2=64, num_warps2=4,
                       num_stages2=2)

    def executed_flops(self, problem, blocks):
        return problem.matmul_flops(7)  # dK/dV kernel: S, dP, dV, dK; dQ kernel: S, dP, dQ (14 N^2 d)

    def workspace_bytes(self, problem, blocks):
        return 0  # dq written once in its own dtype

    supports_varlen = True
    modifiers = ()  # its dQ kernel (kernels/gluon/ws_dq.py) walks every key block: no window, softcap or gate yet

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal, scale, blocks, varlen=None):
        from kernels.gluon.ws_dq import ws_two_pass_backward
        dq_fields = {f"{name}2" for name in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")}
        dkdv = {name: value for name, value in blocks.as_dict().items() if name not in dq_fields}
        return ws_two_pass_backward(q, k, v, do, lse, delta, causal=causal, scale=scale, dkdv_blocks=dkdv,
                                    dq_blocks=blocks.dq_tile(), varlen=varlen)
