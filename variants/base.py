"""The one interface every backward design and baseline implements.

Triton designs (`TritonVariant`) share the Triton forward (O, base-2 LSE) and the delta preprocess,
and implement `run_backward`. Baselines (`Baseline`) wrap a differentiable PyTorch function and time
its autograd backward.
"""
import math
import os
from typing import Callable, ClassVar

import torch

from variants.blocks import Blocks
from variants.problem import Problem

Grads = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # dq [B, Nq, H, D], dk, dv [B, Nk, Hkv, D]


class Variant:
    name: ClassVar[str] = ""
    Blocks: ClassVar[type] = Blocks
    backward_matmuls: ClassVar[int] = 5  # [pair x D] matmuls the backward really executes per visible pair

    def supports(self, problem: Problem) -> str | None:
        """None if this variant can run the problem, else the reason it cannot."""
        return None

    def default_blocks(self, problem: Problem) -> Blocks:
        return self.Blocks()

    def make_blocks(self, problem: Problem, blocks: "Blocks | dict | None" = None) -> Blocks:
        """Validated block config: the given one, or overrides on top of the defaults for the problem."""
        if isinstance(blocks, self.Blocks):
            blocks.validate()
            return blocks
        if blocks is not None and not isinstance(blocks, dict):
            raise ValueError(f"{self.name}: blocks must be a {self.Blocks.__name__} or a dict, got {type(blocks).__name__}")
        return self.Blocks.from_dict(blocks, self.default_blocks(problem))

    def check(self, problem: Problem) -> None:
        reason = self.supports(problem)
        if reason is not None:
            raise ValueError(f"variant {self.name!r} cannot run this problem: {reason}")

    def executed_flops(self, problem: Problem, blocks: Blocks) -> float:
        """FLOPs the design really performs in the backward (matmuls only)."""
        return problem.matmul_flops(self.backward_matmuls)

    def workspace_bytes(self, problem: Problem, blocks: Blocks) -> int:
        """Extra device memory the backward allocates beyond dq, dk, dv (e.g. an fp32 dQ accumulator)."""
        return 0

    def apply(self, q, k, v, causal: bool, scale: float, blocks: Blocks) -> torch.Tensor:
        """Differentiable o [B, Nq, H, D] whose backward is this variant's."""
        raise NotImplementedError

    def prepare(self, q, k, v, do, causal: bool, scale: float, blocks: Blocks) -> Callable[[], Grads]:
        """Runs the forward once and returns a closure that runs the backward alone -> (dq, dk, dv)."""
        raise NotImplementedError


def interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class TritonVariant(Variant):
    backward_matmuls = 7  # dK/dV pass: S, dP, dV, dK; dQ pass: S, dP, dQ

    def supports(self, problem: Problem) -> str | None:
        if problem.device == "cpu" and not interpreter_on():
            return "CPU tensors need the Triton interpreter (set TRITON_INTERPRET=1 before importing)"
        if problem.device not in ("cpu", "cuda"):
            return f"device {problem.device!r} is not supported"
        return None

    def default_blocks(self, problem: Problem) -> Blocks:
        """The per-architecture table's blocks for the problem (conf/block_defaults.yaml)."""
        from variants.block_defaults import default_block_fields
        try:
            return self.Blocks(**default_block_fields(self.name, problem))
        except TypeError as exc:  # a field the Blocks dataclass does not have
            raise ValueError(f"conf/block_defaults.yaml, variant {self.name!r}: {exc}") from None

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal: bool, scale: float, blocks: Blocks) -> Grads:
        raise NotImplementedError

    def backward(self, q, k, v, o, lse, do, delta=None, *, causal: bool, scale: float, blocks: Blocks) -> Grads:
        """(q, k, v, o, lse, do, delta or None) -> (dq, dk, dv). delta = rowsum(dO * O) is computed if None."""
        from kernels.preprocess import attention_delta
        if delta is None:
            delta = attention_delta(o, do)
        return self.run_backward(q, k, v, o, lse, do, delta, causal=causal, scale=scale, blocks=blocks)

    def forward(self, q, k, v, causal: bool, scale: float):
        """The shared Triton forward -> (o [B, Nq, H, D], lse [B, H, Nq] fp32 base 2)."""
        from kernels.forward import attention_forward
        return attention_forward(q, k, v, causal, scale, BLOCK_N=64 if q.shape[-1] <= 128 else 32)

    def apply(self, q, k, v, causal, scale, blocks):
        return _TritonAttention.apply(q, k, v, causal, scale, self, blocks)

    def prepare(self, q, k, v, do, causal, scale, blocks):
        with torch.no_grad():
            o, lse = self.forward(q, k, v, causal, scale)
        return lambda: self.backward(q, k, v, o, lse, do, causal=causal, scale=scale, blocks=blocks)


class _TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, variant, blocks):
        o, lse = variant.forward(q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.variant, ctx.blocks = causal, scale, variant, blocks
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = ctx.variant.backward(q, k, v, o, lse, do, causal=ctx.causal, scale=ctx.scale, blocks=ctx.blocks)
        return dq, dk, dv, None, None, None, None


class Baseline(Variant):
    """A differentiable PyTorch function; its backward is whatever autograd runs."""

    def function(self, q, k, v, causal: bool, scale: float) -> torch.Tensor:
        raise NotImplementedError

    def apply(self, q, k, v, causal, scale, blocks):
        return self.function(q, k, v, causal, scale)

    def prepare(self, q, k, v, do, causal, scale, blocks):
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        o = self.function(*leaves, causal, scale)
        return lambda: torch.autograd.grad(o, leaves, do, retain_graph=True)


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
