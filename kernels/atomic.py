"""atomic (FA2 CUDA style): one kernel over K/V blocks; dK/dV accumulate on chip and dQ is
accumulated across programs into an fp32 buffer with tl.atomic_add, then scaled and cast (~10 N^2 d).

deterministic=True replaces the atomics by the separate dQ pass of two_pass (no atomics, so the
result is bitwise reproducible) at the cost of recomputing S and P (~12 N^2 d) and a second launch.

The forget gate (issue 24, kernels/gate.py): dL/dG_t = sum_j dS_tj (t as a query) - sum_i dS_it (t as a key). In
exact arithmetic the query half is zero (a softmax row does not change when the whole row is shifted), but delta
comes from the rounded O, so each row's sum of dS is off by dO_i . (O_i - round(O_i)); the key half carries the same
error, and dg's reverse cumsum adds it up along the sequence unless the query half, computed from the same dS,
cancels it (N = 16k bf16 measured rel_dg 0.24 without it, results/h100/modifiers). So the kernel adds every
query row's sum of dS into the zeroed as_query by fp32 atomics ([BLOCK_M] per step, next to the dQ atomics);
deterministic mode gets it from the dQ pass.
"""
import torch

from kernels.dkdv_dq import launch_dkdv, launch_dq
from kernels.dq_finish import scale_cast


def atomic_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float, BLOCK_M: int, BLOCK_N: int,
                    num_warps: int, num_stages: int, deterministic: bool = False, longest_first: bool = False, varlen=None,
                    mods=None, gate=None, dq_acc=None):
    """-> dq like q, dk/dv like k/v. varlen: a kernels.varlen.Packing (q [1, total_q, H, D], k/v [1, total_k, Hkv, D]).
    mods: window / softcap (variants.problem.Modifiers) or None; gate: a kernels.gate.GateSums or None (module doc:
    both its sums written). dq_acc: the zeroed fp32 accumulator like q (variants.base: zeroed by the delta launch),
    or None (zeros_like here)."""
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    if deterministic:
        dq = torch.empty_like(q)
        launch_dkdv(q, k, v, do, dq, dk, dv, lse, delta, causal=causal, scale=scale, accumulate_dq=False,
                    BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=num_stages,
                    longest_first=longest_first, varlen=varlen, mods=mods, gate=gate)
        launch_dq(q, k, v, do, dq, lse, delta, causal=causal, scale=scale,
                  BLOCK_M=BLOCK_N, BLOCK_N=BLOCK_M, num_warps=num_warps, num_stages=num_stages,
                  longest_first=longest_first, varlen=varlen, mods=mods, gate=gate)
        return dq, dk, dv
    dq_accum = torch.zeros_like(q, dtype=torch.float32) if dq_acc is None else dq_acc  # [B, Nq, H, D], q's layout
    launch_dkdv(q, k, v, do, dq_accum, dk, dv, lse, delta, causal=causal, scale=scale, accumulate_dq=True,
                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=num_stages,
                longest_first=longest_first, varlen=varlen, mods=mods, gate=gate)
    return scale_cast(dq_accum, q.dtype, scale), dk, dv  # dq_accum.mul_(scale).to(q.dtype) in one launch
