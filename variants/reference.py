"""The single source of truth: attention and its gradients in plain PyTorch math, fp32 or fp64.

Every test and the runner's accuracy gate compare against `reference_forward` / `reference_grads`.
Semantics: q [B, Nq, H, D], k/v [B, Nk, Hkv, D]; GQA query head h uses kv-head h // (H / Hkv);
causal is bottom-right aligned (query i sees key j iff j <= i + Nk - Nq, FlashAttention >= 2.1);
a query row that sees no key outputs 0 and gets zero gradient (as FlashAttention).
"""
import math

import torch


def reference_forward(q, k, v, causal: bool = False, scale: float | None = None,
                      compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """-> o [B, Nq, H, D] in compute_dtype. Differentiable."""
    seq_q, heads, head_dim = q.shape[1], q.shape[2], q.shape[3]
    seq_k, kv_heads = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    group = heads // kv_heads
    q_, k_, v_ = (t.to(compute_dtype).transpose(1, 2) for t in (q, k, v))  # [B, H*, N, D]
    k_ = k_.repeat_interleave(group, dim=1)  # [B, H, Nk, D]
    v_ = v_.repeat_interleave(group, dim=1)
    scores = torch.matmul(q_, k_.transpose(-1, -2)) * scale  # [B, H, Nq, Nk]
    if causal:
        i = torch.arange(seq_q, device=q.device)[:, None]
        j = torch.arange(seq_k, device=q.device)[None, :]
        visible = j <= i + (seq_k - seq_q)  # [Nq, Nk]
        scores = scores.masked_fill(~visible, float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # empty rows -> 0
    else:
        probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v_).transpose(1, 2)  # [B, Nq, H, D]


def reference_grads(q, k, v, do, causal: bool = False, scale: float | None = None,
                    compute_dtype: torch.dtype = torch.float32):
    """-> (o, dq, dk, dv) in compute_dtype, shaped like q, q, k, v."""
    q_, k_, v_ = (t.detach().to(compute_dtype).requires_grad_(True) for t in (q, k, v))
    o = reference_forward(q_, k_, v_, causal, scale, compute_dtype)
    dq, dk, dv = torch.autograd.grad(o, (q_, k_, v_), do.to(compute_dtype))
    return o.detach(), dq, dk, dv


from variants.base import Baseline  # noqa: E402  (registration below the math it wraps)
from variants.registry import register_variant  # noqa: E402


@register_variant("reference")
class Reference(Baseline):
    """PyTorch math in fp32 (output cast back to the input dtype)."""
    backward_matmuls = 5

    def function(self, q, k, v, causal, scale):
        return reference_forward(q, k, v, causal, scale).to(q.dtype)
