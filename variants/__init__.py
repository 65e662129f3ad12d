"""Backward-pass designs behind one interface, found by name.

    from variants import attention, names
    o = attention(q, k, v, causal=True, variant="two_pass")   # q [B, Nq, H, D], k/v [B, Nk, Hkv, D]
    o.backward(do)                                            # runs the two_pass backward

Adding a design: one kernel file (kernels/<name>.py) and one variant file (variants/<name>.py) that subclasses
TritonVariant (or Baseline) under @register_variant("name"); every module of this package is imported below, so no
other edit (docs/interface.md, "Adding a design"). Designs outside the repo: variants/registry.py.
"""
import importlib
import pkgutil

import torch

from variants.base import Baseline, TritonVariant, Variant, default_scale
from variants.blocks import blocks_text
from variants.problem import Problem, check_gate, check_sink, window_pair
from variants.registry import get, names, register_variant
from variants import op
from variants.plan import plans
from spec import LAYOUTS

# The registry: the built-in designs in the order tables and plots list them, then every other module of this package
# (a new design's variant file, in name order; variants/registry.py loads designs from outside the repo).
from variants import reference  # noqa: F401,E402
from variants import two_pass  # noqa: F401,E402
from variants import atomic  # noqa: F401,E402
from variants import atomic_tma  # noqa: F401,E402
from variants import ws  # noqa: F401,E402
from variants import ws_two_pass  # noqa: F401,E402
from variants import fused  # noqa: F401,E402
from variants import sdpa  # noqa: F401,E402
from variants import flex  # noqa: F401,E402
from variants import fa4  # noqa: F401,E402 - FlashAttention-4: flash_attn.cute is imported only when a point runs it

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def attention(q, k, v, causal: bool = False, scale: float | None = None, variant: str = "two_pass",
              blocks=None, layout: str = "bnhd", cu_seqlens_q=None, cu_seqlens_k=None,
              max_seqlen_q: int | None = None, max_seqlen_k: int | None = None, window_size=None,
              softcap: float = 0.0, g=None, sink=None, forward: str | None = None):
    """Differentiable attention whose backward is `variant`'s.

    layout "bnhd": q [B, Nq, H, D], k/v [B, Nk, Hkv, D] (FlashAttention's order, the default);
    layout "bhnd": q [B, H, Nq, D], k/v [B, Hkv, Nk, D]. Either is read through strides, never copied;
    o comes back in the layout of q. blocks: a dict of overrides (or the variant's Blocks) on top of
    the variant's defaults for the problem.

    Packed variable-length batches (FlashAttention's varlen convention): cu_seqlens_q [docs + 1] (int32,
    0 first, total_q last) and cu_seqlens_k (None = cu_seqlens_q), q [total_q, H, D], k/v [total_k, Hkv, D];
    o is [total_q, H, D]. Causal is per document, bottom-right aligned where a document's Nq != Nk.
    max_seqlen_q / max_seqlen_k are optional (checked against the lengths, which are read once on the host).

    Score modifiers (issue 24; a design that lacks one refuses the call with the reason): window_size=(left, right)
    as in FlashAttention (-1 = unbounded; with causal, right = 0): query i sees key j when
    i + Nk - Nq - left <= j <= i + Nk - Nq + right. softcap > 0: the scaled score s becomes softcap * tanh(s / softcap).
    g: FLA's log forget gate, fp32 [B, Nq, H] (bhnd: [B, H, Nq]; packed: [total_q, H]); needs causal and Nq == Nk;
    the score gets + G_i - G_j with G = cumsum(g) per sequence (per document), and g gets its gradient.

    Issue 47 (a design that lacks one refuses the call with the reason): v may have a head dim of its own
    (v [B, Nk, Hkv, Dv], o [B, Nq, H, Dv]; DeepSeek MLA's D = 192, Dv = 128); sink: a learnable per-head logit,
    fp32 [H] (GPT-OSS), that joins every row's softmax denominator with no value, and gets its gradient.

    forward (a Triton design; issue 42): the forward whose O and LSE the backward reads, one of
    kernels.forward_choice.FORWARDS (stock, gluon, auto, sdpa_flash, sdpa_cudnn, fa4); None: the design's
    `default_forward` (auto). A forward that cannot run the call runs the stock one (docs/forward.md). A baseline
    runs its own forward and takes none.

    A Triton design (stock Triton or Gluon) runs as the operator torch.ops.flash_bwd.attention (variants/op.py):
    torch.compile(fullgraph=True) traces through it and CUDA graphs replay it (dense calls). A dense eager call that
    nothing traces skips the operator's dispatch and runs the same implementation over its signature's launch plan
    (variants/plan.py: checks and blocks resolved on the signature's first call only; issue 44). A baseline runs its
    PyTorch function, which torch.compile traces as it is.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    packed = cu_seqlens_q is not None or cu_seqlens_k is not None
    if packed and layout != "bnhd":
        raise ValueError(f"cu_seqlens needs layout 'bnhd' (q [total_q, H, D]), got {layout!r}")
    if packed and cu_seqlens_q is None:
        raise ValueError("cu_seqlens_k given without cu_seqlens_q")
    if layout == "bhnd":
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 4:
                raise ValueError(f"{name} must be 4-D [B, H, N, D], got shape {tuple(t.shape)}")
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, N, H, D] views
        if g is not None and isinstance(g, torch.Tensor) and g.dim() == 3:
            g = g.transpose(1, 2)  # [B, Nq, H] view
    impl = get(variant)
    forward = _forward_arg(impl, forward)
    window_left, window_right = window_pair(window_size, bool(causal))
    operator = isinstance(impl, TritonVariant) and impl.as_operator
    if operator and not packed and op.eager_direct(q, k, v, g, sink):  # eager: the signature's plan, no op dispatch
        plan = plans.dense(impl, q, k, v, causal, blocks_text(blocks), window_left, window_right, softcap, g,
                           sink)
        o = op.eager_attention(plan, q, k, v, plan.default_scale if scale is None else float(scale), g, sink,
                               forward)
        return o.transpose(1, 2) if layout == "bhnd" else o
    if g is not None:
        check_gate(g, q)
    if sink is not None:
        check_sink(sink, q)
    modifiers = dict(window_size=(window_left, window_right), softcap=float(softcap), gate=g is not None)
    # One-line errors here, before the default scale (head dim 0) and the op's dispatch (e.g. devices).
    problem = Problem.from_packed_tensors(q, k, v, causal) if packed else \
        Problem.from_tensors(q, k, v, causal).with_modifiers(**modifiers).with_sink(sink is not None)
    scale = default_scale(problem.head_dim) if scale is None else scale
    if operator:
        o, _ = op.attention_op(q, k, v, bool(causal), scale, variant, blocks_text(blocks), cu_seqlens_q,
                               cu_seqlens_k, max_seqlen_q, max_seqlen_k, window_left, window_right, float(softcap), g,
                               sink, forward or "")
    elif packed:
        o = _packed_direct(impl, q, k, v, causal, scale, blocks, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                           max_seqlen_k, modifiers, g, sink, forward)
    else:
        impl.check(problem)
        config = impl.make_blocks(problem, blocks) if blocks is not None or isinstance(impl, TritonVariant) else None
        o = impl.apply(q, k, v, bool(causal), float(scale), config, mods=problem.mods, g=g, sink=sink,
                       **({} if forward is None else {"forward": forward}))
    return o.transpose(1, 2) if layout == "bhnd" else o


def _forward_arg(impl, forward: str | None) -> str | None:
    """attention()'s `forward`, checked (kernels.forward_choice.check_forward: one-line ValueError); a baseline takes
    none (it runs its own forward)."""
    if forward is None:
        return None
    from kernels.forward_choice import check_forward
    check_forward(forward)
    if not isinstance(impl, TritonVariant):
        raise ValueError(f"forward={forward!r}: {impl.name} is a baseline and runs its own forward")
    return forward


def _packed_direct(impl, q, k, v, causal, scale, blocks, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                   modifiers, g, sink=None, forward=None):
    packing = op.make_packing(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    problem = Problem.from_packed(q, k, v, causal, packing).with_modifiers(**modifiers).with_sink(sink is not None)
    impl.check(problem)
    config = impl.make_blocks(problem, blocks)
    return impl.apply(q, k, v, bool(causal), float(scale), config, varlen=packing, mods=problem.mods, g=g, sink=sink,
                      **({} if forward is None else {"forward": forward}))


__all__ = ["attention", "names", "get", "register_variant", "Variant", "TritonVariant", "Baseline", "Problem"]
