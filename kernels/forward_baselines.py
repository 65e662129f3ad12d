"""Baseline forwards as choices of `forward=` (issue 42, item 2): SDPA's FlashAttention-2 and cuDNN forwards and
FlashAttention-4's, each giving O and the LSE in the backward's convention, so a sweep can put a Triton design's
backward after the fastest forward there is.

    sdpa_flash  torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal, False, scale=)
    sdpa_cudnn  torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, is_causal, False, scale=)
    fa4         flash_attn.cute.flash_attn_func(q, k, v, ..., return_lse=True) (kernels/fa4_lib.py's import and keywords)

Both aten schemas are the same in torch 2.10, 2.11 and 2.13 (q, k, v [B, H, N, D]; the flash op returns
(output, logsumexp [B, H, Nq], ...), the cuDNN op (output, logsumexp [B, H, Nq, 1], ...)). All three write the
natural-log LSE of the scaled scores; the backward reads log2 of the sum of exp2(s * scale * log2 e), i.e. that LSE
times log2 e, with +inf (and O = 0) for a row that sees no key (FA2 writes +inf there, FA4 -inf): `to_backward_lse`.

Each has a `reason` (why it cannot run this call, or None): `kernels.forward_choice.chosen_forward` then runs the
stock forward and records the reason, as it does for the Gluon forward.
"""
import inspect
from typing import Callable, NamedTuple

import torch

from kernels.common import LOG2E

SDPA_DTYPES = (torch.float16, torch.bfloat16)
SDPA_MAX_HEAD_DIM = 256


class BaselineForward(NamedTuple):
    reason: Callable  # (q, k, v, causal, *, varlen, mods, gate, sink) -> str | None
    run: Callable  # (q, k, v, causal, scale, mods) -> (o [B, Nq, H, Dv], lse [B, H, Nq] fp32 base 2)


# ---- the convention ---------------------------------------------------------------------------------------------

def to_backward_lse(o, lse_ln, heads_first: bool, zero_empty: bool = True):
    """(o [B, Nq, H, Dv] dense, lse [B, H, Nq] fp32 base 2) of a forward's o ([B, H, Nq, Dv] when heads_first, as
    SDPA returns it, else [B, Nq, H, Dv]) and natural-log LSE ([B, H, Nq], or with trailing singleton dims as cuDNN's
    [B, H, Nq, 1]). A row whose LSE is +-inf saw no key: LSE +inf there, and O = 0 unless zero_empty is False
    (a caller whose every row sees a key skips that pass over O)."""
    o = o.transpose(1, 2) if heads_first else o  # [B, Nq, H, Dv]
    batch, seq_q, heads = o.shape[:3]
    lse = lse_ln.float().reshape(batch, heads, seq_q) * LOG2E  # [B, H, Nq]
    empty = torch.isinf(lse)  # [B, H, Nq]
    lse = lse.masked_fill(empty, float("inf"))
    if zero_empty:
        o = o.masked_fill(empty.transpose(1, 2).unsqueeze(-1), 0.0)  # [B, Nq, H, 1] against [B, Nq, H, Dv]
    return o.contiguous(), lse


def rows_may_be_empty(q, k, causal: bool, mods=None) -> bool:
    """Whether some query row may see no key: causal with Nq > Nk (bottom-right), or a window."""
    return (causal and q.shape[1] > k.shape[1]) or bool(mods is not None and getattr(mods, "active", False))


def heads_first(t):
    """[B, H, N, D] view of a [B, N, H, D] tensor, copied only where the head dim is strided."""
    t = t if t.stride(-1) == 1 else t.contiguous()
    return t.transpose(1, 2)


# ---- why a baseline forward cannot run a call -------------------------------------------------------------------

def common_reason(name: str, q, k, v, *, varlen=None, mods=None, gate=None, sink=None) -> str | None:
    """What none of the baseline forwards is wired for here: packed documents, the gate, a sink, a CPU tensor,
    Nk = 0."""
    if varlen is not None:
        return f"the {name} forward is not wired for packed documents (cu_seqlens)"
    if gate is not None:
        return f"the {name} forward has no forget gate"
    if sink is not None:
        return f"the {name} forward is not wired for a learnable sink"
    if q.device.type != "cuda":
        return f"the {name} forward needs a CUDA tensor; this is a {q.device.type} tensor"
    if k.shape[1] == 0:
        return f"no keys (Nk = 0): nothing for the {name} forward to attend"
    return None


def sdpa_reason(name: str, q, k, v, causal: bool, mods=None) -> str | None:
    """What SDPA's fused ops cannot do as the backward needs it: a window or softcap, causal with Nq != Nk (SDPA's
    is_causal is top-left aligned, ours bottom-right), fp32, head dims past 256 or not a multiple of 8."""
    if mods is not None and getattr(mods, "active", False):
        return f"the {name} forward has no window or softcap"
    if causal and q.shape[1] != k.shape[1]:
        return (f"the {name} forward's causal mask is top-left aligned, the backward's bottom-right: Nq != Nk "
                f"({q.shape[1]} != {k.shape[1]})")
    if q.dtype not in SDPA_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"the {name} forward runs fp16 and bf16, not {q.dtype}"
    dims = {q.shape[-1], v.shape[-1]}
    if any(d % 8 or d > SDPA_MAX_HEAD_DIM for d in dims):
        return f"the {name} forward takes head dims up to {SDPA_MAX_HEAD_DIM} in multiples of 8, not {sorted(dims)}"
    return None


def sdpa_flash_reason(q, k, v, causal: bool, *, varlen=None, mods=None, gate=None, sink=None) -> str | None:
    reason = (common_reason("sdpa_flash", q, k, v, varlen=varlen, gate=gate, sink=sink)
              or sdpa_reason("sdpa_flash", q, k, v, causal, mods))
    if reason is None and v.shape[-1] != q.shape[-1]:
        return f"the sdpa_flash forward takes V's head dim equal to Q's, not {v.shape[-1]} != {q.shape[-1]}"
    return reason  # GQA: FlashAttention-2 reads k/v with fewer heads itself


def sdpa_cudnn_reason(q, k, v, causal: bool, *, varlen=None, mods=None, gate=None, sink=None) -> str | None:
    reason = (common_reason("sdpa_cudnn", q, k, v, varlen=varlen, gate=gate, sink=sink)
              or sdpa_reason("sdpa_cudnn", q, k, v, causal, mods))
    if reason is None and k.shape[2] != q.shape[2]:
        return (f"the sdpa_cudnn forward takes k/v with the query's heads (no GQA here, as the sdpa_cudnn "
                f"baseline), not {q.shape[2]} / {k.shape[2]}")
    return reason  # a value head dim of its own: cuDNN takes it


def fa4_reason(q, k, v, causal: bool, *, varlen=None, mods=None, gate=None, sink=None) -> str | None:
    """kernels/fa4_lib.py's rules (installed, sm90 / sm100, its head dims, fp16 / bf16) and a flash_attn_func that
    returns the LSE (`return_lse`). Causal Nq != Nk, GQA, window and softcap: FA4 takes them as the backward means
    them."""
    from kernels import fa4_lib as fa4
    reason = common_reason("fa4", q, k, v, varlen=varlen, gate=gate, sink=sink)
    if reason is not None:
        return reason
    if q.dtype not in fa4.DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"the fa4 forward runs fp16 and bf16, not {q.dtype}"
    if not fa4.installed():
        return fa4.NOT_INSTALLED
    reason = fa4.arch_reason(torch.cuda.get_device_capability(q.device)[0], q.shape[-1], v.shape[-1])
    if reason is None and "return_lse" not in inspect.signature(fa4.cute().flash_attn_func).parameters:
        return "this flash_attn.cute's flash_attn_func has no return_lse (an older FlashAttention-4)"
    return reason


# ---- the calls --------------------------------------------------------------------------------------------------

def run_sdpa_flash(q, k, v, causal: bool, scale: float, mods=None):
    """q [B, Nq, H, D], k/v [B, Nk, Hkv, D] -> (o [B, Nq, H, D], lse [B, H, Nq] fp32 base 2)."""
    out = torch.ops.aten._scaled_dot_product_flash_attention(heads_first(q), heads_first(k), heads_first(v), 0.0,
                                                             bool(causal), False, scale=scale)
    # out [B, H, Nq, D], logsumexp [B, H, Nq]; every row sees a key (sdpa_reason: causal only with Nq = Nk >= 1)
    return to_backward_lse(out[0], out[1], heads_first=True, zero_empty=False)


def run_sdpa_cudnn(q, k, v, causal: bool, scale: float, mods=None):
    """q [B, Nq, H, D], k/v [B, Nk, H, D or Dv] -> (o [B, Nq, H, Dv], lse [B, H, Nq] fp32 base 2)."""
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(heads_first(q), heads_first(k), heads_first(v), None,
                                                             True, 0.0, bool(causal), False, scale=scale)
    # out [B, H, Nq, Dv], logsumexp [B, H, Nq, 1]; every row sees a key, as for sdpa_flash
    return to_backward_lse(out[0], out[1], heads_first=True, zero_empty=False)


def run_fa4(q, k, v, causal: bool, scale: float, mods=None):
    """q [B, Nq, H, D], k/v [B, Nk, Hkv, D / Dv] -> (o [B, Nq, H, Dv], lse [B, H, Nq] fp32 base 2)."""
    from kernels import fa4_lib as fa4
    q, k, v = (fa4.layout(t) for t in (q, k, v))
    o, lse = fa4.cute().flash_attn_func(q, k, v, return_lse=True, **fa4.call_kwargs(causal, scale, mods))
    # o [B, Nq, H, Dv], lse [B, H, Nq] (-inf where a row sees no key)
    return to_backward_lse(o, lse, heads_first=False, zero_empty=rows_may_be_empty(q, k, causal, mods))


BASELINE_FORWARDS = {
    "sdpa_flash": BaselineForward(sdpa_flash_reason, run_sdpa_flash),
    "sdpa_cudnn": BaselineForward(sdpa_cudnn_reason, run_sdpa_cudnn),
    "fa4": BaselineForward(fa4_reason, run_fa4),
}
