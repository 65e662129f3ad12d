"""The one interface every backward design and baseline implements.

Triton designs (`TritonVariant`) share the Triton forward (O, base-2 LSE) and the delta preprocess,
and implement `run_backward`. Baselines (`Baseline`) wrap a differentiable PyTorch function and time
its autograd backward.

Packed varlen batches (`varlen=`, a kernels.varlen.Packing): q [total_q, H, D], k/v [total_k, Hkv, D]
(FlashAttention's convention). A variant serves them only if it says so (`supports_varlen`); otherwise
`supports()` gives the reason.
"""
import dataclasses
import math
import os
from typing import Callable, ClassVar

import torch

from kernels.forward_choice import DEFAULT_FORWARD
from variants.blocks import Blocks
from variants.problem import NO_MODIFIERS, Modifiers, Problem

Grads = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # dq [B, Nq, H, D], dk, dv [B, Nk, Hkv, D]


class Variant:
    name: ClassVar[str] = ""
    Blocks: ClassVar[type] = Blocks
    backward_matmuls: ClassVar[int] = 5  # [pair x D] matmuls the backward really executes per visible pair
    value_matmuls: ClassVar[int] = 2  # of them, those over V's head dim (dP, dV; Problem.matmul_flops)
    supports_varlen: ClassVar[bool] = False  # True: apply/prepare take varlen= (packed documents, cu_seqlens)
    # False: the CPU Triton interpreter cannot run it (e.g. a Gluon design); the tests' interpreter matrix skips it
    runs_in_interpreter: ClassVar[bool] = True
    # small blocks for the tests' correctness matrix, so that short lengths span several blocks and partial tails
    # (tests/test_variants.py; the built-in designs' are its SMALL_BLOCKS); None: the design's defaults are not used
    test_blocks: ClassVar[dict | None] = None
    # compute capabilities (90 = sm90) the design's kernels are written for; None: every one Triton compiles for.
    # Elsewhere runners.compile_check reports `unsupported` with `arch_requirement` (what the design needs there)
    archs: ClassVar[tuple[int, ...] | None] = None
    arch_requirement: ClassVar[str] = ""
    # the score modifiers (issue 24) the design implements, of "window", "softcap", "gate"; a problem using another
    # one is refused with the reason (`modifier_reason`), never run without it
    modifiers: ClassVar[tuple[str, ...]] = ()
    # issue 47: True once the design takes a value head dim of its own (head_dim_v != head_dim, MLA's 192 / 128) /
    # a learnable per-head sink (GPT-OSS); otherwise `mla_reason` refuses the problem with the reason
    supports_head_dim_v: ClassVar[bool] = False
    supports_sink: ClassVar[bool] = False

    def supports(self, problem: Problem) -> str | None:
        """None if this variant can run the problem, else the reason it cannot."""
        return self.problem_reason(problem)

    def problem_reason(self, problem: Problem) -> str | None:
        """Why the design's kernels cannot serve this problem's shape, dtype or layout on any device, or None: the
        part of `supports` that does not ask the GPU at hand (runners.compile_check asks it with none)."""
        return self.modifier_reason(problem) or self.varlen_reason(problem) or self.mla_reason(problem)

    def mla_reason(self, problem: Problem) -> str | None:
        """The reason a value head dim of its own or a sink (issue 47) cannot run here, or None."""
        if problem.value_dim != problem.head_dim and not self.supports_head_dim_v:
            return (f"{self.name} does not implement a value head dim of its own (head_dim {problem.head_dim}, "
                    f"head_dim_v {problem.value_dim})")
        if problem.sink and not self.supports_sink:
            return f"{self.name} does not implement a learnable attention sink"
        return None

    def modifier_reason(self, problem: Problem) -> str | None:
        """The reason a problem's score modifiers (window, softcap, gate) cannot run here, or None."""
        missing = [name for name in problem.modifiers if name not in self.modifiers]
        if missing:
            return f"{self.name} does not implement {' / '.join(missing)} (score modifiers, issue 24)"
        return None

    def arch_reason(self, capability: int, blocks: Blocks | None = None) -> str | None:
        """Why this design (with these blocks) cannot run on a GPU of that compute capability (90 = sm90), or None."""
        if self.archs is not None and capability not in self.archs:
            need = self.arch_requirement or "sm" + "/sm".join(str(a) for a in self.archs)
            return f"{self.name} needs {need}; this is sm{capability}"
        return None

    def varlen_reason(self, problem: Problem) -> str | None:
        """The reason a packed varlen problem cannot run here, or None."""
        if problem.is_varlen and not self.supports_varlen:
            return f"{self.name} does not implement packed variable-length batches (cu_seqlens)"
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
        return problem.matmul_flops(self.backward_matmuls, self.value_matmuls)

    def workspace_bytes(self, problem: Problem, blocks: Blocks) -> int:
        """Extra device memory the backward allocates beyond dq, dk, dv (e.g. an fp32 dQ accumulator)."""
        return 0

    def apply(self, q, k, v, causal: bool, scale: float, blocks: Blocks, varlen=None, mods: Modifiers = NO_MODIFIERS,
              g=None, sink=None) -> torch.Tensor:
        """Differentiable o [B, Nq, H, Dv] (varlen: [total_q, H, Dv]) whose backward is this variant's.
        mods: window / softcap (Problem.mods); g: the forget gate [B, Nq, H] fp32 (varlen: [total_q, H]) or None;
        sink: the per-head sink logits fp32 [H] or None (issue 47)."""
        raise NotImplementedError

    def prepare(self, q, k, v, do, causal: bool, scale: float, blocks: Blocks, varlen=None,
                mods: Modifiers = NO_MODIFIERS, g=None, sink=None) -> Callable[[], Grads]:
        """Runs the forward once and returns a closure that runs the backward alone -> (dq, dk, dv), then dg when
        a gate g is given, then dsink when a sink is given."""
        raise NotImplementedError


def interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class TritonVariant(Variant):
    """A Triton design. Packed varlen batches: set `supports_varlen = True` once `run_backward` accepts
    `varlen=` (a kernels.varlen.Packing; q, k, v then arrive as [1, total, H, D])."""
    backward_matmuls = 7  # dK/dV pass: S, dP, dV, dK; dQ pass: S, dP, dQ
    value_matmuls = 3  # dP, dV; dP
    # attention() runs the design as the operator torch.ops.flash_bwd.attention (variants/op.py: torch.compile
    # traces it whole). False: a backward that itself uses torch.autograd, which cannot run inside an operator
    # (attention() then calls the design directly and torch.compile breaks the graph around it)
    as_operator = True
    # the forward whose O and LSE the design's backward reads when a call names none (kernels.forward_choice.FORWARDS;
    # auto: Gluon on sm90 where it covers the problem, else stock); attention() and the operator run this one, the
    # sweep's `forward` key overrides it
    default_forward: ClassVar[str] = DEFAULT_FORWARD

    def supports(self, problem: Problem) -> str | None:
        if problem.device == "cpu" and not interpreter_on():
            return "CPU tensors need the Triton interpreter (set TRITON_INTERPRET=1 before importing)"
        if problem.device not in ("cpu", "cuda"):
            return f"device {problem.device!r} is not supported"
        return self.problem_reason(problem)

    def default_blocks(self, problem: Problem) -> Blocks:
        """The per-architecture table's blocks for the problem (conf/block_defaults.yaml); a design with no rules
        there runs on its Blocks dataclass defaults."""
        from variants.block_defaults import default_block_fields
        try:
            blocks = self.Blocks(**default_block_fields(self.name, problem))
        except TypeError as exc:  # a field the Blocks dataclass does not have
            raise ValueError(f"conf/block_defaults.yaml, variant {self.name!r}: {exc}") from None
        if problem.gate and getattr(blocks, "prescale", False):  # the kernels refuse it (kernels.gate.check_prescale)
            blocks = dataclasses.replace(blocks, prescale=False)
        return blocks

    def run_backward(self, q, k, v, o, lse, do, delta, *, causal: bool, scale: float, blocks: Blocks) -> Grads:
        raise NotImplementedError

    def dq_workspace(self, q, blocks: Blocks, varlen=None):
        """None, or the fp32 dQ accumulator (not yet zeroed) of a design that accumulates dQ across programs:
        `backward` has the delta launch zero it and hands it to run_backward as dq_acc= (issue 44: one launch per
        call fewer than torch.zeros). q is [B, Nq, H, D] (packed: [1, total_q, H, D])."""
        return None

    def backward(self, q, k, v, o, lse, do, delta=None, *, causal: bool, scale: float, blocks: Blocks,
                 varlen=None, mods: Modifiers = NO_MODIFIERS, g=None, sink=None) -> Grads:
        """(q, k, v, o, lse, do, delta or None) -> (dq, dk, dv), then dg (like g) when a gate g is given, then
        dsink (fp32 [H], kernels.sink.sink_grad from the LSE and delta) when a sink is given.
        delta = rowsum(dO * O) is computed if None.
        varlen: q, o, do [total_q, H, D], k, v [total_k, Hkv, D], lse [1, H, total_q]; the design sees them
        as one sequence [1, total, H, D] plus the Packing. A design sees mods= / gate= (kernels.gate.GateSums) in
        run_backward only when a modifier is on, so one that implements none keeps its signature."""
        from kernels.gate import gate_grad, gate_sums
        from kernels.preprocess import attention_delta
        if varlen is not None:
            q, k, v, o, do = (t.unsqueeze(0) for t in (q, k, v, o, do))
        workspace = self.dq_workspace(q, blocks, varlen)  # zeroed by the delta launch (no fill launch of its own)
        if delta is None:
            delta = attention_delta(o, do, zero=workspace)  # row-wise: a packed batch is one sequence of total_q rows
        elif workspace is not None:
            workspace.zero_()
        extra = {} if varlen is None else dict(varlen=varlen)
        if workspace is not None:
            extra["dq_acc"] = workspace
        if mods.active:
            extra["mods"] = mods
        if g is not None:
            extra["gate"] = gate_sums(g, varlen)
        grads = self.run_backward(q, k, v, o, lse, do, delta, causal=causal, scale=scale, blocks=blocks, **extra)
        if varlen is not None:
            grads = tuple(grad.squeeze(0) for grad in grads)
        if g is not None:
            grads = (*grads, gate_grad(extra["gate"], varlen))
        if sink is not None:
            from kernels.sink import sink_grad
            grads = (*grads, sink_grad(sink, lse, delta))
        return grads

    def forward(self, q, k, v, causal: bool, scale: float, varlen=None, mods: Modifiers = NO_MODIFIERS, g=None,
                sink=None, forward: str | None = None):
        """The forward the backward reads -> (o [B, Nq, H, Dv], lse [B, H, Nq] fp32 base 2);
        varlen: o [total_q, H, Dv], lse [1, H, total_q]. mods, g: the score modifiers (Variant.apply); sink fp32 [H]
        or None: it enters each row's maximum and denominator, so the LSE carries it. forward: which forward
        (kernels.forward_choice.FORWARDS: stock, the shared Triton one; gluon / auto, kernels/gluon/forward.py where
        it covers the problem on sm90, else stock; sdpa_flash / sdpa_cudnn / fa4, a baseline's forward where it can
        run the call, else stock); None: the design's `default_forward`."""
        forward = forward or self.default_forward
        from kernels.forward_choice import run_forward
        from kernels.gate import gate_cumsum
        block_n = 64 if max(q.shape[-1], v.shape[-1]) <= 128 else 32
        gate = None if g is None else gate_cumsum(g, varlen)  # [B, H, Nq] fp32 (packed [1, H, total_q])
        if varlen is None:
            return run_forward(forward, q, k, v, causal, scale, BLOCK_N=block_n, mods=mods, gate=gate, sink=sink)
        o, lse = run_forward(forward, q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), causal, scale,
                             BLOCK_N=block_n, varlen=varlen, mods=mods, gate=gate, sink=sink)
        return o.squeeze(0), lse

    def apply(self, q, k, v, causal, scale, blocks, varlen=None, mods=NO_MODIFIERS, g=None, sink=None,
              forward: str | None = None):
        """forward: the forward whose O and LSE the backward reads (kernels.forward_choice); None: the design's
        `default_forward`."""
        return _TritonAttention.apply(q, k, v, causal, scale, self, blocks, varlen, mods, g, sink, forward)

    def prepare(self, q, k, v, do, causal, scale, blocks, varlen=None, mods=NO_MODIFIERS, g=None, sink=None,
                forward: str | None = None):
        """forward: the forward whose O and LSE the backward reads (kernels.forward_choice); None: the design's
        `default_forward`."""
        with torch.no_grad():
            o, lse = self.forward(q, k, v, causal, scale, varlen, mods, g, sink, forward)
        return lambda: self.backward(q, k, v, o, lse, do, causal=causal, scale=scale, blocks=blocks, varlen=varlen,
                                     mods=mods, g=g, sink=sink)


def split_extra_grads(grads, g, sink):
    """(dg or None, dsink or None) from a backward's (dq, dk, dv[, dg][, dsink])."""
    rest = list(grads[3:])
    dg = rest.pop(0) if g is not None else None
    dsink = rest.pop(0) if sink is not None else None
    return dg, dsink


class _TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, variant, blocks, varlen=None, mods=NO_MODIFIERS, g=None, sink=None,
                forward=None):
        o, lse = variant.forward(q, k, v, causal, scale, varlen, mods, g, sink, forward)
        ctx.save_for_backward(q, k, v, o, lse, g, sink)
        ctx.causal, ctx.scale, ctx.variant, ctx.blocks, ctx.varlen, ctx.mods = causal, scale, variant, blocks, varlen, mods
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, g, sink = ctx.saved_tensors
        grads = ctx.variant.backward(q, k, v, o, lse, do, causal=ctx.causal, scale=ctx.scale, blocks=ctx.blocks,
                                     varlen=ctx.varlen, mods=ctx.mods, g=g, sink=sink)
        dg, dsink = split_extra_grads(grads, g, sink)
        return *grads[:3], None, None, None, None, None, None, dg, dsink, None


class Baseline(Variant):
    """A differentiable PyTorch function; its backward is whatever autograd runs. A baseline that serves
    packed batches sets `supports_varlen = True` and implements `varlen_function`."""

    def function(self, q, k, v, causal: bool, scale: float) -> torch.Tensor:
        raise NotImplementedError

    def varlen_function(self, q, k, v, causal: bool, scale: float, varlen) -> torch.Tensor:
        """q [total_q, H, D], k/v [total_k, Hkv, D], varlen a kernels.varlen.Packing -> o [total_q, H, D]."""
        raise NotImplementedError

    def apply(self, q, k, v, causal, scale, blocks, varlen=None, mods=NO_MODIFIERS, g=None, sink=None):
        """A baseline that implements score modifiers takes mods= and g= in function / varlen_function (it
        sees them only when one is on); one that implements a sink (supports_sink) takes sink= (only when given)."""
        extra = dict(mods=mods, g=g) if mods.active or g is not None else {}
        if sink is not None:
            extra["sink"] = sink
        if varlen is not None:
            return self.varlen_function(q, k, v, causal, scale, varlen, **extra)
        return self.function(q, k, v, causal, scale, **extra)

    def prepare(self, q, k, v, do, causal, scale, blocks, varlen=None, mods=NO_MODIFIERS, g=None, sink=None):
        extra = tuple(t for t in (g, sink) if t is not None)
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v) + extra]
        named = dict(zip([name for name, t in (("g", g), ("sink", sink)) if t is not None], leaves[3:]))
        o = self.apply(*leaves[:3], causal, scale, blocks, varlen, mods, named.get("g"), named.get("sink"))
        return lambda: torch.autograd.grad(o, leaves, do, retain_graph=True)


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
