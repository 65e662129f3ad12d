"""two_pass (FLA style): a dK/dV kernel (K/V block resident, loop over Q/dO) and a dQ kernel
(Q block resident, loop over K/V). No atomics; S and P are recomputed in both (~12 N^2 d FLOPs)."""
import torch

from kernels.dkdv_dq import launch_dkdv, launch_dq


def two_pass_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float,
                      BLOCK_M1: int, BLOCK_N1: int, num_warps1: int, num_stages1: int,
                      BLOCK_M2: int, BLOCK_N2: int, num_warps2: int, num_stages2: int, longest_first: bool,
                      prescale: bool, split_dkdv: bool = False, split_d: bool = False, varlen=None, mods=None,
                      gate=None):
    """-> dq like q, dk/dv like k/v. Suffix 1: the dK/dV kernel; suffix 2: the dQ kernel.
    split_dkdv: the dK/dV kernel runs as a dV pass and a dK pass (launch_dkdv's split).
    split_d: both kernels hold a non-power-of-two head dim as two register blocks (192 = 128 + 64).
    varlen: a kernels.varlen.Packing (q [1, total_q, H, D], k/v [1, total_k, Hkv, D]).
    mods: window / softcap (variants.problem.Modifiers) or None; gate: a kernels.gate.GateSums or None."""
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    launch_dkdv(q, k, v, do, dq, dk, dv, lse, delta, causal=causal, scale=scale, accumulate_dq=False,
                BLOCK_M=BLOCK_M1, BLOCK_N=BLOCK_N1, num_warps=num_warps1, num_stages=num_stages1,
                longest_first=longest_first, prescale=prescale, split=split_dkdv, split_d=split_d, varlen=varlen,
                mods=mods, gate=gate)
    launch_dq(q, k, v, do, dq, lse, delta, causal=causal, scale=scale,
              BLOCK_M=BLOCK_M2, BLOCK_N=BLOCK_N2, num_warps=num_warps2, num_stages=num_stages2,
              longest_first=longest_first, prescale=prescale, split_d=split_d, varlen=varlen, mods=mods, gate=gate)
    return dq, dk, dv
