"""atomic (FA2 CUDA style): one kernel over K/V blocks; dK/dV accumulate on chip and dQ is
accumulated across programs into an fp32 buffer with tl.atomic_add, then scaled and cast (~10 N^2 d).

deterministic=True replaces the atomics by the separate dQ pass of two_pass (no atomics, so the
result is bitwise reproducible) at the cost of recomputing S and P (~12 N^2 d) and a second launch.

The forget gate (issue 24, kernels/gate.py): dL/dG_t = sum_j dS_tj (t as a query) - sum_i dS_it (t as a key). The
query half is exactly zero: G_i is added to every score of row i, and a softmax does not change when its whole row
is shifted (sum_j dS_ij = sum_j P_ij dP_ij - delta_i sum_j P_ij = delta_i - delta_i = 0; a gated row always sees
its own key). So no per-query sums are accumulated across programs (no dG atomics): the kernel writes the per-key
sums, and the query half is zero (the two-pass designs compute it, and get rounding noise: ~1e-7 of the key
half's size in fp32, ~1e-4 in fp16).
"""
import torch

from kernels.two_pass import launch_dkdv, launch_dq


def atomic_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float, BLOCK_M: int, BLOCK_N: int,
                    num_warps: int, num_stages: int, deterministic: bool = False, longest_first: bool = False, varlen=None,
                    mods=None, gate=None):
    """-> dq like q, dk/dv like k/v. varlen: a kernels.varlen.Packing (q [1, total_q, H, D], k/v [1, total_k, Hkv, D]).
    mods: window / softcap (variants.problem.Modifiers) or None; gate: a kernels.gate.GateSums or None (module doc:
    its as_query is zero unless deterministic)."""
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
    dq_accum = torch.zeros_like(q, dtype=torch.float32)  # [B, Nq, H, D], q's memory layout
    launch_dkdv(q, k, v, do, dq_accum, dk, dv, lse, delta, causal=causal, scale=scale, accumulate_dq=True,
                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=num_stages,
                longest_first=longest_first, varlen=varlen, mods=mods, gate=gate)
    if gate is not None:
        gate.as_query.zero_()  # sum_j dS_ij = 0 for every query row (module doc)
    return dq_accum.mul_(scale).to(q.dtype), dk, dv
