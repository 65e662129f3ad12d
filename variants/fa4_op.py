"""FlashAttention-4's dense forward and backward as a pair of PyTorch operators (issue 42's model step), so that
torch.compile and CUDA graphs see one opaque op per call, as our designs' `torch.ops.flash_bwd.attention` is
(variants/op.py). FA4's own entry point (`flash_attn_func`, an autograd.Function around CuTe DSL launches) cannot
be traced: Dynamo stops inside it. Here the forward op runs FA4's `_flash_attn_fwd` (with its LSE), the backward op
its `_flash_attn_bwd`, joined by `register_autograd`; FA4 picks its own tiles in both, as flash_attn_func does.

    torch.ops.flash_bwd.fa4_attention(q, k, v, causal, scale, window_left, window_right, softcap, sink) -> (o, lse)
    torch.ops.flash_bwd.fa4_attention_backward(do, q, k, v, o, lse, <the same arguments>) -> (dq, dk, dv, dsink)

q [B, Nq, H, D], k / v [B, Nk, Hkv, D] (v may have a head dim of its own), lse fp32 [B, H, Nq] (FA4's natural log
base); window_left / window_right as variants.problem.window_pair writes them (-1 = unbounded), softcap 0 = off,
sink fp32 [H] or None (dsink is then an empty tensor). FA4 itself is imported only inside the ops' bodies, which
run on real tensors, never under tracing.
"""
import importlib

import torch
from torch import Tensor

from kernels.fa4_lib import MODULE, layout, window_sizes
from variants.op import NAMESPACE


def _interface():
    """FA4's interface module (its private entry points `_flash_attn_fwd`, `_flash_attn_bwd`)."""
    return importlib.import_module(f"{MODULE}.interface")


def _window(left: int, right: int) -> dict:
    """FA4's private entry points' window keywords (kernels.fa4_lib.window_sizes)."""
    return dict(zip(("window_size_left", "window_size_right"), window_sizes(left, right)))


@torch.library.custom_op(f"{NAMESPACE}::fa4_attention", mutates_args=())
def fa4_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, window_left: int = -1,
                  window_right: int = -1, softcap: float = 0.0, sink: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(o [B, Nq, H, Dv], lse fp32 [B, H, Nq]) by FA4's forward."""
    q, k, v = (layout(t) for t in (q, k, v))
    o, lse = _interface()._flash_attn_fwd(q, k, v, softmax_scale=scale, causal=causal, softcap=softcap,
                                          learnable_sink=sink, return_lse=True,
                                          **_window(window_left, window_right))[:2]
    return o, lse


@fa4_attention.register_fake
def _fa4_attention_fake(q, k, v, causal, scale, window_left=-1, window_right=-1, softcap=0.0, sink=None):
    batch, seq_q, heads, _ = q.shape
    return (q.new_empty((batch, seq_q, heads, v.shape[-1])),
            q.new_empty((batch, heads, seq_q), dtype=torch.float32))


@torch.library.custom_op(f"{NAMESPACE}::fa4_attention_backward", mutates_args=())
def fa4_attention_backward(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool,
                           scale: float, window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                           sink: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq like q, dk like k, dv like v, dsink like sink or empty) by FA4's backward."""
    q, k, v, o, do = (layout(t) for t in (q, k, v, o, do))
    grads = _interface()._flash_attn_bwd(q, k, v, o, do, lse, scale, causal, softcap, learnable_sink=sink,
                                         **_window(window_left, window_right))
    dq, dk, dv = (grad.contiguous() for grad in grads[:3])
    dsink = grads[3] if sink is not None else q.new_empty(0, dtype=torch.float32)
    return dq, dk, dv, dsink


@fa4_attention_backward.register_fake
def _fa4_attention_backward_fake(do, q, k, v, o, lse, causal, scale, window_left=-1, window_right=-1, softcap=0.0,
                                 sink=None):
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format),
            q.new_empty(0, dtype=torch.float32) if sink is None else torch.empty_like(sink))


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, window_left, window_right, softcap, sink = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, sink)
    ctx.args = (causal, scale, window_left, window_right, softcap)


def _backward(ctx, do, _dlse):
    q, k, v, o, lse, sink = ctx.saved_tensors
    dq, dk, dv, dsink = fa4_attention_backward(do, q, k, v, o, lse, *ctx.args, sink)
    return dq, dk, dv, None, None, None, None, None, (dsink if sink is not None else None)


fa4_attention.register_autograd(_backward, setup_context=_setup_context)
