"""The argument groups every backward kernel takes, built once from tensors on the host.

A backward kernel's runtime arguments come in five groups, in this order, then its constexprs (Triton passes a
tuple leaf by leaf, in order, so grouping changes nothing in the compiled kernel):
    tensors  BackwardTensors: q, k, v, do, dq, dk, dv [B, N, H, D] and lse, delta [B, H, Nq] fp32
    strides  BackwardStrides: a kernels.common.Strides per [B, N, H, D] tensor (None: the kernel does not read them)
    sizes    Sizes: lengths, heads and the two scales
    docs     kernels.varlen.Documents (None each for a dense batch)
    gate     GateTensors (None each without the forget gate)
Inside a kernel: `Q, K, V, DO, DQ, DK, DV, LSE, DELTA = tensors`, `strides.q.n`, ...
The compile-time switches of the shared steps (kernels/dkdv_steps.py, kernels/dq_steps.py) are one StepConfig record,
passed whole as a constexpr (`CFG.GATED`; a field used as a shape is rebound first: `BLOCK_D: tl.constexpr = CFG.BLOCK_D`,
Triton 3.6 hands record fields out as plain Python values).
"""
from typing import NamedTuple

import torch

from kernels.common import LOG2E, Strides, strides


class BackwardTensors(NamedTuple):
    q: torch.Tensor  # [B, Nq, H, D]
    k: torch.Tensor  # [B, Nk, Hkv, D]
    v: torch.Tensor  # [B, Nk, Hkv, D]
    do: torch.Tensor  # [B, Nq, H, D]
    dq: torch.Tensor  # [B, Nq, H, D] (atomic: fp32; atomic_tma: its accumulator [B, H, Nq, BLOCK_D])
    dk: torch.Tensor  # [B, Nk, Hkv, D]
    dv: torch.Tensor  # [B, Nk, Hkv, D]
    lse: torch.Tensor  # [B, H, Nq] fp32, base 2
    delta: torch.Tensor  # [B, H, Nq] fp32, rowsum(dO * O)


class BackwardStrides(NamedTuple):
    q: Strides
    k: Strides
    v: Strides
    do: Strides
    dq: Strides | None
    dk: Strides
    dv: Strides


class Sizes(NamedTuple):
    seq_q: int
    seq_k: int
    heads: int
    kv_heads: int
    qk_scale: float  # scale * log2(e): scores in base-2 units
    sm_scale: float  # scale


class GateTensors(NamedTuple):
    """The forget gate's tensors, all [B, H, Nq] fp32 like LSE (kernels/gate.py)."""
    g: torch.Tensor | None  # its cumsum G
    dg: torch.Tensor | None  # the per-key sums of dS (a dK/dV kernel) or per-query ones (the dQ kernel)
    dg_query: torch.Tensor | None  # the per-query sums that a dK/dV kernel adds in (atomics, or fused's dQ half)


NO_GATE = GateTensors(None, None, None)


class StepConfig(NamedTuple):  # hashable: Triton specializes the kernel on it like on any constexpr
    """A dK/dV or dQ program's compile-time switches (kernels/dkdv_steps.py, kernels/dq_steps.py)."""
    HEAD_DIM: int  # the head dims and their register blocks: kernels.common.head_dim_args
    BLOCK_D: int
    BLOCK_D2: int  # > 0: the head dim's second register block
    EVEN_D: bool
    EVEN_D2: bool
    HEAD_DIM_V: int
    BLOCK_DV: int
    EVEN_DV: bool
    BLOCK_M: int  # query block
    BLOCK_N: int  # key block
    EVEN_M: bool  # the walked / resident blocks stay inside the sequences: kernels.common.even_blocks
    EVEN_N: bool
    CAUSAL: bool
    PRESCALED: bool  # the resident K (dK/dV) or Q (dQ) block multiplied by qk_scale once
    DOT_PRECISION: str
    WINDOW_LEFT: int  # score modifiers: kernels.common.modifier_args
    WINDOW_RIGHT: int
    SOFTCAP: float
    GATED: bool
    SLICE: int = 1  # the causal diagonal walked in blocks of BLOCK / SLICE
    ACCUM_DQ: bool = False  # the dK/dV program also adds dS K into the fp32 dQ by atomics
    GRADS: int = 3  # the dK/dV program's gradients: 1 dV only, 2 dK only, 3 both


def step_config(head_args: dict, mods: dict, **switches) -> StepConfig:
    """The record from kernels.common.head_dim_args, kernels.common.modifier_args and the remaining fields by name."""
    return StepConfig(**head_args, **mods, **switches)


def backward_args(q, k, v, do, dq, dk, dv, lse, delta, scale: float, dq_strides: bool = True) -> dict:
    """tensors=, strides=, sizes= of every backward kernel. dq_strides=False: dq is not a [B, N, H, D] tensor
    (atomic_tma's accumulator), its strides are None."""
    return dict(tensors=BackwardTensors(q, k, v, do, dq, dk, dv, lse, delta),
                strides=BackwardStrides(strides(q), strides(k), strides(v), strides(do),
                                        strides(dq) if dq_strides else None, strides(dk), strides(dv)),
                sizes=Sizes(q.shape[1], k.shape[1], q.shape[2], k.shape[2], scale * LOG2E, scale))
