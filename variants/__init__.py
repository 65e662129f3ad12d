"""Backward-pass designs behind one interface, found by name.

    from variants import attention, names
    o = attention(q, k, v, causal=True, variant="two_pass")   # q [B, Nq, H, D], k/v [B, Nk, Hkv, D]
    o.backward(do)                                            # runs the two_pass backward

Adding a variant: one file that subclasses TritonVariant (or Baseline) under @register_variant("name"),
plus one import line below.
"""
from variants.base import Baseline, TritonVariant, Variant, default_scale
from variants.problem import Problem
from variants.registry import get, names, register_variant

# The registry: one line per variant file.
from variants import reference  # noqa: F401,E402
from variants import two_pass  # noqa: F401,E402
from variants import atomic  # noqa: F401,E402
from variants import atomic_tma  # noqa: F401,E402
from variants import fused  # noqa: F401,E402
from variants import sdpa  # noqa: F401,E402
from variants import flex  # noqa: F401,E402

LAYOUTS = ("bnhd", "bhnd")


def attention(q, k, v, causal: bool = False, scale: float | None = None, variant: str = "two_pass",
              blocks=None, layout: str = "bnhd"):
    """Differentiable attention whose backward is `variant`'s.

    layout "bnhd": q [B, Nq, H, D], k/v [B, Nk, Hkv, D] (FlashAttention's order, the default);
    layout "bhnd": q [B, H, Nq, D], k/v [B, Hkv, Nk, D]. Either is read through strides, never copied;
    o comes back in the layout of q. blocks: a dict of overrides (or the variant's Blocks) on top of
    the variant's defaults for the problem.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "bhnd":
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 4:
                raise ValueError(f"{name} must be 4-D [B, H, N, D], got shape {tuple(t.shape)}")
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    impl = get(variant)
    problem = Problem.from_tensors(q, k, v, causal)
    impl.check(problem)
    config = impl.make_blocks(problem, blocks)
    scale = default_scale(problem.head_dim) if scale is None else float(scale)
    o = impl.apply(q, k, v, bool(causal), scale, config)
    return o.transpose(1, 2) if layout == "bhnd" else o


__all__ = ["attention", "names", "get", "register_variant", "Variant", "TritonVariant", "Baseline", "Problem"]
