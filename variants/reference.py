"""The single source of truth: attention and its gradients in plain PyTorch math, fp32 or fp64.

Every test and the runner's accuracy gate compare against `reference_forward` / `reference_grads`.
Semantics: q [B, Nq, H, D], k/v [B, Nk, Hkv, D]; GQA query head h uses kv-head h // (H / Hkv);
causal is bottom-right aligned (query i sees key j iff j <= i + Nk - Nq, FlashAttention >= 2.1);
a query row that sees no key outputs 0 and gets zero gradient (as FlashAttention).
Packed varlen batches (cu_seqlens_q / cu_seqlens_k given): q [total_q, H, D], k/v [total_k, Hkv, D],
computed by a loop over the documents, each one the uniform case above (causal per document).
Score modifiers (issue 24), on the scaled score s = scale * q.k, in this order: softcap (s -> softcap *
tanh(s / softcap)), the forget gate (s + G_i - G_j, G = cumsum(g) along each sequence / document; g [B, Nq, H]
fp32, packed [total_q, H]), then the causal and window masks (window_size (left, right), -1 = unbounded:
query i sees key j iff i + Nk - Nq - left <= j <= i + Nk - Nq + right).
Issue 47: v may have a head dim of its own (v [B, Nk, Hkv, Dv], o [B, Nq, H, Dv]: MLA's 192 / 128), and a
learnable sink (fp32 [H], one logit per query head, GPT-OSS) joins every row's softmax denominator as one more
score with no value: p_ij = exp(s_ij) / (exp(sink_h) + sum_j exp(s_ij)); it gets its gradient by autograd.
"""
import math

import torch


def reference_forward(q, k, v, causal: bool = False, scale: float | None = None,
                      compute_dtype: torch.dtype = torch.float32, cu_seqlens_q=None, cu_seqlens_k=None,
                      window_size=None, softcap: float = 0.0, g=None, sink=None) -> torch.Tensor:
    """-> o [B, Nq, H, Dv] (varlen: [total_q, H, Dv]) in compute_dtype. Differentiable (in g and sink too)."""
    if cu_seqlens_q is not None:
        return _packed_forward(q, k, v, causal, scale, compute_dtype, cu_seqlens_q, cu_seqlens_k,
                               window_size, softcap, g, sink)
    seq_q, heads, head_dim = q.shape[1], q.shape[2], q.shape[3]
    seq_k, kv_heads = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    group = heads // kv_heads
    q_, k_, v_ = (t.to(compute_dtype).transpose(1, 2) for t in (q, k, v))  # [B, H*, N, D]
    k_ = k_.repeat_interleave(group, dim=1)  # [B, H, Nk, D]
    v_ = v_.repeat_interleave(group, dim=1)
    scores = torch.matmul(q_, k_.transpose(-1, -2)) * scale  # [B, H, Nq, Nk]
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    if g is not None:
        gate = g.to(compute_dtype).cumsum(dim=1).transpose(1, 2)  # [B, H, N]: G = cumsum(g) along the sequence
        scores = scores + gate[..., :, None] - gate[..., None, :]
    visible = visible_pairs(seq_q, seq_k, causal, window_size, q.device)  # [Nq, Nk] or None
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    probs = _softmax(scores, sink)  # [B, H, Nq, Nk]
    if visible is not None:
        # a row that sees no key (its softmax is 0/0) -> 0, by the mask alone: a NaN from the inputs propagates
        probs = probs.masked_fill(~visible.any(dim=-1, keepdim=True), 0.0)
    return torch.matmul(probs, v_).transpose(1, 2)  # [B, Nq, H, Dv]


def _softmax(scores, sink):
    """softmax over the keys of scores [B, H, Nq, Nk]; with a sink (fp32 [H]) one more column per row, sink[h],
    that joins the denominator and is dropped after (it has no value)."""
    if sink is None:
        return torch.softmax(scores, dim=-1)
    column = sink.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:-1], 1)  # [B, H, Nq, 1]
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


def visible_pairs(seq_q: int, seq_k: int, causal: bool, window_size, device):
    """bool [Nq, Nk]: query i sees key j (causal and window bottom-right aligned), or None when it sees every key."""
    left, right = (-1, -1) if window_size is None else window_size
    right = 0 if causal else right
    if left < 0 and right < 0:
        return None
    i = torch.arange(seq_q, device=device)[:, None]
    j = torch.arange(seq_k, device=device)[None, :]
    diagonal = i + (seq_k - seq_q)  # [Nq, 1]: the key aligned with query i
    visible = torch.ones(seq_q, seq_k, dtype=torch.bool, device=device)
    if left >= 0:
        visible &= j >= diagonal - left
    if right >= 0:
        visible &= j <= diagonal + right
    return visible


def _packed_forward(q, k, v, causal, scale, compute_dtype, cu_seqlens_q, cu_seqlens_k, window_size=None,
                    softcap=0.0, g=None, sink=None):
    """The per-document loop: document d is q[cu_q[d]:cu_q[d+1]] against k/v[cu_k[d]:cu_k[d+1]]."""
    cu_q = [int(x) for x in cu_seqlens_q.tolist()]
    cu_k = cu_q if cu_seqlens_k is None else [int(x) for x in cu_seqlens_k.tolist()]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    outs = []
    for (q0, q1), (k0, k1) in zip(zip(cu_q, cu_q[1:]), zip(cu_k, cu_k[1:])):
        if q1 == q0:
            continue
        if k1 == k0:  # a document without keys: its queries see nothing, output 0
            outs.append(torch.zeros((q1 - q0, *q.shape[1:-1], v.shape[-1]), dtype=compute_dtype, device=q.device))
            continue
        gate = None if g is None else g[None, q0:q1]  # [1, Nq_d, H]: cumsum restarts per document
        outs.append(reference_forward(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal, scale, compute_dtype,
                                      window_size=window_size, softcap=softcap, g=gate, sink=sink)[0])
    if not outs:
        return torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=compute_dtype, device=q.device)
    return torch.cat(outs, dim=0)  # [total_q, H, Dv]


def reference_grads(q, k, v, do, causal: bool = False, scale: float | None = None,
                    compute_dtype: torch.dtype = torch.float32, cu_seqlens_q=None, cu_seqlens_k=None,
                    window_size=None, softcap: float = 0.0, g=None, sink=None):
    """-> (o, dq, dk, dv) in compute_dtype, o [B, Nq, H, Dv] and the grads shaped like q, k, v (varlen: cu_seqlens_q /
    cu_seqlens_k given); with a forget gate g: (o, dq, dk, dv, dg), dg shaped like g; with a sink [H]: dsink [H]
    last (fp32 [H] like sink)."""
    extra = tuple(t for t in (g, sink) if t is not None)
    leaves = [t.detach().to(compute_dtype).requires_grad_(True) for t in (q, k, v) + extra]
    named = dict(zip([name for name, t in (("g", g), ("sink", sink)) if t is not None], leaves[3:]))
    o = reference_forward(*leaves[:3], causal, scale, compute_dtype, cu_seqlens_q, cu_seqlens_k, window_size, softcap,
                          named.get("g"), named.get("sink"))
    grads = torch.autograd.grad(o, leaves, do.to(compute_dtype), allow_unused=True)
    grads = (torch.zeros_like(t) if grad is None else grad for t, grad in zip(leaves, grads))
    return (o.detach(), *grads)


from variants.base import Baseline  # noqa: E402  (registration below the math it wraps)
from variants.registry import register_variant  # noqa: E402


@register_variant("reference")
class Reference(Baseline):
    """PyTorch math in fp32 (output cast back to the input dtype)."""
    backward_matmuls = 5
    supports_varlen = True

    modifiers = ("window", "softcap", "gate")
    supports_head_dim_v = True
    supports_sink = True

    def function(self, q, k, v, causal, scale, mods=None, g=None, sink=None):
        return reference_forward(q, k, v, causal, scale, **modifier_args(mods, g), sink=sink).to(q.dtype)

    def varlen_function(self, q, k, v, causal, scale, varlen, mods=None, g=None, sink=None):
        return reference_forward(q, k, v, causal, scale, torch.float32, varlen.cu_seqlens_q, varlen.cu_seqlens_k,
                                 **modifier_args(mods, g), sink=sink).to(q.dtype)


def modifier_args(mods, g) -> dict:
    """reference_forward's modifier keywords from a Problem carrying them (or None: none) and the gate."""
    if mods is None:
        return dict(g=g)
    return dict(window_size=(mods.window_left, mods.window_right), softcap=mods.softcap, g=g)
