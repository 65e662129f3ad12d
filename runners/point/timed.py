"""What a row times (issue 42, the `timed` key): the backward alone (every row before it), the forward alone, or a
training pass (forward + backward in one call). This module builds the timed closure of the forward and train kinds,
their FLOPs and their accuracy gate on O (and the LSE where the design exposes it); runners/point/measure.py runs
them as it runs the backward.

    backward  variant.prepare's closure: the backward after one untimed forward (rows as before; config_key as before)
    forward   a Triton design: its chosen forward (the point's `forward`: stock / gluon / auto) -> O and the base-2
              LSE, both gated; a baseline: its own forward (variant.apply) on inputs that require grad, as a training
              step's forward runs (SDPA then keeps its logsumexp for the backward) -> O gated
    train     the forward above and the backward from its O (and LSE) in one call -> O, the LSE and every gradient
              gated

FLOPs by the FlashAttention convention (variants.problem.Problem): forward 2 * B * H * pairs * (D + Dv), backward
2 * B * H * pairs * (3 D + 2 Dv), train their sum.
"""
import math

import torch

from spec import TIMED  # noqa: F401 - re-exported: backward, forward, train
from runners.point import accuracy_scope
from runners.point.reference_rows import packed_reference_o_lse, reference_o_lse
from variants.accuracy import REL_TOL, error
from variants.problem import NO_MODIFIERS

LSE_REL_TOL = 1e-3  # the base-2 LSE: fp32 row statistics of the same (fp16 / bf16 / fp32) inputs, any dtype


def flops(problem, timed: str) -> float:
    """The FLOP-convention FLOPs of what `timed` times."""
    return {"backward": problem.backward_flops, "forward": problem.forward_flops,
            "train": lambda: problem.forward_flops() + problem.backward_flops()}[timed]()


def executed_flops(variant, problem, blocks, timed: str) -> float:
    """The matmul FLOPs the design really runs: its backward's (Variant.executed_flops), the forward's two matmuls
    over the counted pairs, or both."""
    backward = float(variant.executed_flops(problem, blocks)) if timed != "forward" else 0.0
    return backward + (problem.forward_flops() if timed != "backward" else 0.0)


def workspace_bytes(variant, problem, blocks, timed: str) -> float:
    """The backward's extra memory (Variant.workspace_bytes); NaN for the forward alone (none is declared)."""
    return math.nan if timed == "forward" else int(variant.workspace_bytes(problem, blocks))


def unsupported(variant, timed: str) -> str | None:
    """Why this design cannot time `timed`, or None: the forward and train kinds need a forward to call, a Triton
    design's (TritonVariant.forward) or a baseline's differentiable function (Baseline.apply)."""
    from variants.base import Baseline, TritonVariant
    if timed == "backward" or isinstance(variant, (TritonVariant, Baseline)):
        return None
    return (f"timed={timed}: {variant.name} is neither a Triton design nor a baseline (it has only prepare(), no "
            "forward of its own to time)")


def prepare(variant, point, problem, inputs: tuple, forward: str | None):
    """The timed closure of a forward or train point -> (o, lse or None, *grads) (grads only for train).
    inputs: runners.point.measure.point_inputs' (q, k, v, do, g, packing, sink); forward: the forward a Triton design
    runs (None: its default; a baseline runs its own)."""
    from variants.base import TritonVariant, default_scale
    q, k, v, do, g, packing, sink = inputs
    causal, scale = point.causal, default_scale(point.head_dim)
    mods = problem.mods if problem.modifiers else NO_MODIFIERS
    if isinstance(variant, TritonVariant):
        def design_call():
            with torch.no_grad():
                o, lse = variant.forward(q, k, v, causal, scale, packing, mods, g, sink, forward)
                if point.timed == "forward":
                    return o, lse
                return (o, lse, *variant.backward(q, k, v, o, lse, do, causal=causal, scale=scale,
                                                  blocks=point.blocks, varlen=packing, mods=mods, g=g, sink=sink))
        return design_call
    extra = tuple(t for t in (g, sink) if t is not None)
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v) + extra]
    named = dict(zip([name for name, t in (("g", g), ("sink", sink)) if t is not None], leaves[3:]))

    def baseline_call():
        with torch.enable_grad():
            o = variant.apply(*leaves[:3], causal, scale, point.blocks, packing, mods, named.get("g"),
                              named.get("sink"))
            if point.timed == "forward":
                return o.detach(), None
            return (o.detach(), None, *torch.autograd.grad(o, leaves, do))
    return baseline_call


# ---- the accuracy gate on O and the LSE -------------------------------------------------------------------------

def lse_error_columns(lse, ref) -> tuple[dict, str]:
    """({max_abs_lse, rel_lse}, '' or the failure): the error over the rows that see a key; a row that sees none
    must be +inf in both."""
    seen = torch.isfinite(ref)
    err = error(lse[seen], ref[seen])
    cols = {"max_abs_lse": err.max_abs, "rel_lse": err.rel}
    if not bool((lse[~seen] == ref[~seen]).all()):
        return cols, "lse not +inf where a row sees no key"
    return cols, "" if err.rel <= LSE_REL_TOL else f"rel_lse={err.rel:.3g} > tolerance {LSE_REL_TOL:g}"


def check_forward(o, lse, q, k, v, causal: bool, scale: float, dtype, varlen=None, mods=NO_MODIFIERS, g=None,
                  sink=None) -> dict:
    """Error columns of a forward's O (and LSE; None: the design does not expose it) against the fp32 reference, on
    the backward gate's scope (runners.point.accuracy_scope), with `correct` and `_wrong_reason`."""
    if varlen is not None:
        ref_o, ref_lse = packed_reference_o_lse(q, k, v, causal, scale, varlen, mods, g, sink)
        scope, q_slice, lse_slice = "full-per-document", (lambda t: t), (lambda t: t)
    else:
        one_call = mods.active or g is not None or sink is not None  # no query chunks: the scope in one call
        scope = accuracy_scope.reference_scope(q, k, accuracy_scope.REF_CHUNK_BYTES if one_call else None)
        q_slice, k_slice = accuracy_scope.scope_slice(q, k, scope)
        group = q.shape[2] // k.shape[2]  # the scope's query heads (lse [B, H, Nq])
        lse_slice = (lambda t: t) if scope == "full" else (lambda t: t[:1, :group])
        ref_o, ref_lse = reference_o_lse(q_slice(q), k_slice(k), k_slice(v), causal, scale, mods,
                                         accuracy_scope.sliced_gate(q_slice, g),
                                         accuracy_scope.sliced_sink(q, q_slice, sink))
    err = error(q_slice(o), ref_o)
    cols = {"accuracy_scope": scope, "max_abs_o": err.max_abs, "rel_o": err.rel}
    bad = [] if err.ok(dtype) else [f"rel_o={err.rel:.3g} > tolerance {REL_TOL[dtype]:g} for {dtype}"]
    if lse is not None:
        lse_cols, lse_bad = lse_error_columns(lse_slice(lse).float(), ref_lse)
        cols.update(lse_cols)
        bad += [lse_bad] if lse_bad else []
    cols["correct"] = not bad
    cols["_wrong_reason"] = "; ".join(bad).replace("torch.", "")
    return cols


def merge_gates(forward_cols: dict, backward_cols: dict) -> dict:
    """A train point's columns: the forward's and the backward's gates, correct only when both are."""
    reasons = [r for r in (forward_cols["_wrong_reason"], backward_cols["_wrong_reason"]) if r]
    return {**backward_cols, **{k: v for k, v in forward_cols.items() if k != "accuracy_scope"},
            "correct": forward_cols["correct"] and backward_cols["correct"], "_wrong_reason": "; ".join(reasons)}
