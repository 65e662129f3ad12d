"""The Triton designs as PyTorch operators, so that torch.compile and CUDA graphs see one opaque op per call.

    torch.ops.flash_bwd.attention(q, k, v, causal, scale, variant, blocks, cu_seqlens_q, cu_seqlens_k,
                                  max_seqlen_q, max_seqlen_k, window_left, window_right, softcap, g, sink,
                                  forward) -> (o, lse)
    torch.ops.flash_bwd.attention_backward(do, q, k, v, o, lse, <the same arguments>) -> (dq, dk, dv, dg, dsink)

The score modifiers (issue 24): window_left / window_right as normalized by variants.problem.window_pair (-1 =
unbounded), softcap (0 = off) and the forget gate g (None = off); dg is an empty tensor when g is None. Issue 47:
the learnable sink (fp32 [H], None = off); dsink is an empty tensor when sink is None. v (and so o, do, dv) may
have a head dim of its own. forward: the forward whose O and LSE the backward reads (kernels.forward_choice.FORWARDS;
'' = the design's `default_forward`).

`attention()` (variants/__init__.py) calls the first for every TritonVariant (stock Triton and Gluon, dense and
packed); autograd runs the second. Each is a `torch.library.custom_op` with a fake implementation (shapes and
strides only) and the pair is joined by `register_autograd`, so `torch.compile(model, fullgraph=True)` traces a
model through it without a graph break and Inductor never sees a Triton kernel (issue 27: Inductor typed the
scale of a traced kernel launch fp64). The variant travels as its name (a string), the block overrides as
'name=value;...' text; the design, its checks and its blocks are resolved inside the op, on real tensors.

Shapes: dense q [B, Nq, H, D], k/v [B, Nk, Hkv, D], lse [B, H, Nq] fp32; packed q [total_q, H, D],
k/v [total_k, Hkv, D], lse [1, H, total_q]. A packed call reads its cu_seqlens on the host (kernels.varlen.Packing)
in the forward and again in the backward, so it cannot be captured in a CUDA graph; a dense call can.
"""
import contextlib

import torch
from torch import Tensor

from kernels.launch import current_device
from variants.base import split_extra_grads  # imported before this module (variants/__init__.py): no cycle
from variants.blocks import blocks_from_text
from variants.plan import Plan, plans
from variants.problem import Problem, check_gate, check_sink
from variants.registry import get

NAMESPACE = "flash_bwd"


def make_packing(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """The kernels.varlen.Packing of a packed call (q [total_q, H, D], k [total_k, Hkv, D]), its optional
    max_seqlen_* checked against the lengths: one-line ValueError."""
    from kernels.varlen import Packing
    packing = Packing(cu_seqlens_q, cu_seqlens_k, total_q=q.shape[0] if q.dim() == 3 else None,
                      total_k=k.shape[0] if k.dim() == 3 else None)
    for name, given, actual in (("max_seqlen_q", max_seqlen_q, packing.max_q),
                                ("max_seqlen_k", max_seqlen_k, packing.max_k)):
        if given is not None and given < actual:
            raise ValueError(f"{name}={given} is shorter than the longest document ({actual})")
    return packing


def _resolve(q, k, v, causal, variant, blocks, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
             window_left=-1, window_right=-1, softcap=0.0, g=None, sink=None):
    """(design, its validated Blocks, Packing or None, Problem) for one call; one-line ValueError on anything wrong.
    A dense call's are its signature's plan (variants/plan.py): resolved once, looked up after."""
    impl = get(variant)
    if cu_seqlens_q is None:  # dense: the signature's plan (variants/plan.py), checked on its first call only
        plan = plans.dense(impl, q, k, v, causal, blocks, window_left, window_right, softcap, g, sink)
        return impl, plan.blocks, None, plan.problem
    packing = make_packing(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    problem = Problem.from_packed(q, k, v, causal, packing)
    if g is not None:
        check_gate(g, q)
    if sink is not None:
        check_sink(sink, q)
    problem = problem.with_modifiers((window_left, window_right), softcap, g is not None).with_sink(sink is not None)
    impl.check(problem)
    config = impl.make_blocks(problem, blocks_from_text(blocks))
    return impl, config, packing, problem


def _lse_shape(q: Tensor, packed: bool) -> tuple[int, int, int]:
    return (1, q.shape[1], q.shape[0]) if packed else (q.shape[0], q.shape[2], q.shape[1])  # [B, H, Nq]


def _like(grad: Tensor, of: Tensor) -> Tensor:
    """grad in the strides the fake implementation promised (torch.empty_like(of)'s), copied only if they differ."""
    expected = torch.empty_like(of, device="meta").stride()
    if grad.stride() == expected:
        return grad
    out = torch.empty_like(of)
    out.copy_(grad)
    return out


@torch.library.custom_op(f"{NAMESPACE}::attention", mutates_args=())
def attention_op(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, variant: str, blocks: str,
                 cu_seqlens_q: Tensor | None, cu_seqlens_k: Tensor | None, max_seqlen_q: int | None,
                 max_seqlen_k: int | None, window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                 g: Tensor | None = None, sink: Tensor | None = None,
                 forward: str = "") -> tuple[Tensor, Tensor]:
    """(o [.., H, Dv] in q's strides when Dv = D, lse fp32 base 2): the forward `forward` names ('' = the design's
    `default_forward`; kernels.forward_choice), after the design's checks."""
    impl, _, packing, problem = _resolve(q, k, v, causal, variant, blocks, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                         max_seqlen_k, window_left, window_right, softcap, g, sink)
    o, lse = impl.forward(q, k, v, causal, float(scale), packing, problem.mods, g, sink, forward or None)
    return _like(o, _out_like(q, v)), lse


def _out_like(q: Tensor, v: Tensor) -> Tensor:
    """A tensor o is promised to look like: q itself, or (a value head dim of its own) a contiguous meta
    [.., H, Dv] (the forward allocates o contiguous then)."""
    if v.shape[-1] == q.shape[-1]:
        return q
    return q.new_empty((*q.shape[:-1], v.shape[-1]), device="meta")


@attention_op.register_fake
def _attention_fake(q, k, v, causal, scale, variant, blocks, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    window_left=-1, window_right=-1, softcap=0.0, g=None, sink=None, forward=""):
    lse = q.new_empty(_lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32)
    if v.shape[-1] != q.shape[-1]:
        return q.new_empty((*q.shape[:-1], v.shape[-1])), lse
    return torch.empty_like(q), lse


@torch.library.custom_op(f"{NAMESPACE}::attention_backward", mutates_args=())
def attention_backward_op(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool,
                          scale: float, variant: str, blocks: str, cu_seqlens_q: Tensor | None,
                          cu_seqlens_k: Tensor | None, max_seqlen_q: int | None,
                          max_seqlen_k: int | None, window_left: int = -1, window_right: int = -1,
                          softcap: float = 0.0, g: Tensor | None = None,
                          sink: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq like q, dk like k, dv like v, dg like g or empty, dsink like sink or empty): the design's backward."""
    from variants.base import split_extra_grads
    impl, config, packing, problem = _resolve(q, k, v, causal, variant, blocks, cu_seqlens_q, cu_seqlens_k,
                                              max_seqlen_q, max_seqlen_k, window_left, window_right, softcap, g, sink)
    grads = impl.backward(q, k, v, o, lse, do, causal=causal, scale=float(scale), blocks=config, varlen=packing,
                          mods=problem.mods, g=g, sink=sink)
    dg, dsink = split_extra_grads(grads, g, sink)
    return (*(_like(grad, of) for grad, of in zip(grads, (q, k, v))),
            q.new_empty(0, dtype=torch.float32) if dg is None else dg,  # two outputs must not alias
            q.new_empty(0, dtype=torch.float32) if dsink is None else dsink)


@attention_backward_op.register_fake
def _attention_backward_fake(do, q, k, v, o, lse, causal, scale, variant, blocks, cu_seqlens_q, cu_seqlens_k,
                             max_seqlen_q, max_seqlen_k, window_left=-1, window_right=-1, softcap=0.0, g=None,
                             sink=None):
    dg = torch.empty_like(g) if g is not None else q.new_empty(0, dtype=torch.float32)
    dsink = torch.empty_like(sink) if sink is not None else q.new_empty(0, dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dg, dsink


def _setup_context(ctx, inputs, output):
    (q, k, v, causal, scale, variant, blocks, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
     window_left, window_right, softcap, g, sink, _forward) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, g, sink)
    ctx.arguments = (causal, scale, variant, blocks)
    ctx.max_seqlens = (max_seqlen_q, max_seqlen_k)
    ctx.modifiers = (window_left, window_right, softcap)
    ctx.mark_non_differentiable(lse)


def _backward(ctx, do, dlse):
    q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, g, sink = ctx.saved_tensors
    dq, dk, dv, dg, dsink = attention_backward_op(do, q, k, v, o, lse, *ctx.arguments, cu_seqlens_q, cu_seqlens_k,
                                                  *ctx.max_seqlens, *ctx.modifiers, g, sink)
    return (dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None,
            dg if g is not None else None, dsink if sink is not None else None, None)


attention_op.register_autograd(_backward, setup_context=_setup_context)


# ------------------------------------------------------------------------------------------ the eager path (issue 44)
# An eager call does not need the operator's dispatch (torch.library's Python layer and its autograd wrapper: 42 % of
# the host time of an eager ws call in issue 44's profile). When nothing traces the call (not torch.compile, no dispatch
# or torch-function mode, no functorch transform, plain tensors, no CUDA graph capture), attention() runs the same
# implementation through _EagerAttention, an autograd.Function over the signature's plan. Anything that traces still
# sees the operator: torch.compile(fullgraph=True) and CUDA graphs trace torch.ops.flash_bwd.attention as before.
EAGER_DIRECT = [True]  # False: every call goes through the operator (`through_operator`; the tests run both paths)


@contextlib.contextmanager
def through_operator():
    """Within it, attention() calls the operator even when eager (the path torch.compile traces), e.g. to test it."""
    was = EAGER_DIRECT[0]
    EAGER_DIRECT[0] = False
    try:
        yield
    finally:
        EAGER_DIRECT[0] = was


def eager_direct(q, k, v, g, sink=None) -> bool:
    """Whether attention() may skip the operator's dispatch for these tensors: nothing traces or captures the call."""
    if torch.compiler.is_compiling() or not EAGER_DIRECT[0]:
        return False
    if torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled() or \
            torch._C._are_functorch_transforms_active():
        return False
    if type(q) is not Tensor or type(k) is not Tensor or type(v) is not Tensor or \
            (g is not None and type(g) is not Tensor) or (sink is not None and type(sink) is not Tensor):
        return False
    return not (q.is_cuda and torch.cuda.is_current_stream_capturing())


class _EagerAttention(torch.autograd.Function):
    """The operator pair's implementations (attention_op, attention_backward_op) over a plan, without dispatch: the
    same forward, the same backward, results in the same strides."""

    @staticmethod
    def forward(ctx, q, k, v, g, sink, plan: Plan, scale: float, forward: str | None = None):
        forward = forward or plan.impl.default_forward  # part of both phases' keys: it decides the launches and o
        if plan.unbound_reason is None:  # the forward's launches bound after its first call (kernels/launch.py)
            with plan.sites(("forward", current_device(), forward)).phase():
                o, lse = plan.impl.forward(q, k, v, plan.causal, scale, None, plan.mods, g, sink, forward)
        else:
            o, lse = plan.impl.forward(q, k, v, plan.causal, scale, None, plan.mods, g, sink, forward)
        ctx.save_for_backward(q, k, v, o, lse, g, sink)
        ctx.plan, ctx.scale, ctx.forward = plan, scale, forward
        return plan.like(o, 0, q) if o.shape == q.shape else o  # Dv != D: o as the forward made it (contiguous)

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, g, sink = ctx.saved_tensors
        plan = ctx.plan
        if plan.unbound_reason is None:  # keyed by dO's layout: the kernels take its strides and its pointer
            key = ("backward", current_device(), do.stride(), do.dtype, do.data_ptr() % 16 == 0, ctx.forward)
            with plan.sites(key).phase():
                grads = plan.impl.backward(q, k, v, o, lse, do, causal=plan.causal, scale=ctx.scale,
                                           blocks=plan.blocks, mods=plan.mods, g=g, sink=sink)
        else:
            grads = plan.impl.backward(q, k, v, o, lse, do, causal=plan.causal, scale=ctx.scale, blocks=plan.blocks,
                                       mods=plan.mods, g=g, sink=sink)
        dq, dk, dv = (plan.like(grad, which, of) for which, (grad, of) in enumerate(zip(grads, (q, k, v))))
        dg, dsink = split_extra_grads(grads, g, sink)
        return dq, dk, dv, dg, dsink, None, None, None


def eager_attention(plan: Plan, q, k, v, scale: float, g=None, sink=None, forward: str | None = None) -> Tensor:
    """o like attention_op's first result, by _EagerAttention (the caller checked `eager_direct`)."""
    return _EagerAttention.apply(q, k, v, g, sink, plan, scale, forward)
