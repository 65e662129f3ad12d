"""The fp32 reference's forward over every row of a long problem: O and the base-2 LSE in query chunks of
accuracy_scope.REF_CHUNK_BYTES fp32 scores (the forward / train gates, runners/point/timed.py), and from them the
sink's gradient over every batch entry and row (the backward gate's dsink on any scope, runners/point/measure.py)."""
import math

import torch

from runners.point import accuracy_scope
from variants.problem import NO_MODIFIERS
from variants.reference import reference_forward, visible_pairs


def reference_lse(q, k, causal: bool, scale: float, mods=NO_MODIFIERS, g=None, sink=None) -> torch.Tensor:
    """[B, H, Nq] fp32, the forward's convention: log2 of the sum of exp(score) over the visible keys (the scores of
    variants.reference.reference_forward: softcap, the gate, the masks) plus exp(sink[h]) with a sink; +inf for a row
    that sees no key (and has no sink)."""
    heads, kv_heads = q.shape[2], k.shape[2]
    q_ = q.float().transpose(1, 2)  # [B, H, Nq, D]
    k_ = k.float().transpose(1, 2).repeat_interleave(heads // kv_heads, dim=1)  # [B, H, Nk, D]
    scores = torch.matmul(q_, k_.transpose(-1, -2)) * scale  # [B, H, Nq, Nk]
    if mods.softcap:
        scores = mods.softcap * torch.tanh(scores / mods.softcap)
    if g is not None:
        gate = g.float().cumsum(dim=1).transpose(1, 2)  # [B, H, Nq]
        scores = scores + gate[..., :, None] - gate[..., None, :]
    visible = visible_pairs(q.shape[1], k.shape[1], causal, (mods.window_left, mods.window_right), q.device)
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    if sink is not None:
        column = sink.float()[None, :, None, None].expand(*scores.shape[:-1], 1)  # [B, H, Nq, 1]
        scores = torch.cat([scores, column], dim=-1)
    lse = torch.logsumexp(scores, dim=-1) / math.log(2.0)
    return torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)


def reference_o_lse(q, k, v, causal: bool, scale: float, mods=NO_MODIFIERS, g=None, sink=None):
    """(o [B, Nq, H, Dv], lse [B, H, Nq]) fp32 of a dense batch, over query chunks of REF_CHUNK_BYTES fp32 scores
    (rows are independent, a sink too: one more column per row; causal chunk [a, b) sees the keys [0, b + Nk - Nq),
    bottom-right kept). With a modifier or the gate: one call (a chunk would move the window's diagonal and restart
    the gate's cumsum)."""
    batch, seq_q, heads, _ = q.shape
    seq_k = k.shape[1]
    window = (mods.window_left, mods.window_right)
    rows = accuracy_scope.chunk_rows(batch, heads, seq_k)
    if mods.active or g is not None or rows >= seq_q:
        o = reference_forward(q, k, v, causal, scale, window_size=window, softcap=mods.softcap, g=g, sink=sink)
        return o, reference_lse(q, k, causal, scale, mods, g, sink)
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=torch.float32, device=q.device)
    lse = torch.full((batch, heads, seq_q), float("inf"), dtype=torch.float32, device=q.device)
    for start in range(0, seq_q, rows):
        stop = min(seq_q, start + rows)
        keys = min(seq_k, stop + seq_k - seq_q) if causal else seq_k
        if keys <= 0:  # these queries see no key: O = 0, LSE = +inf (with a sink: the sink's alone)
            if sink is not None:
                lse[:, :, start:stop] = sink.float()[None, :, None] / math.log(2.0)
            continue
        o[:, start:stop] = reference_forward(q[:, start:stop], k[:, :keys], v[:, :keys], causal, scale, sink=sink)
        lse[:, :, start:stop] = reference_lse(q[:, start:stop], k[:, :keys], causal, scale, sink=sink)
    return o, lse


def packed_reference_o_lse(q, k, v, causal: bool, scale: float, packing, mods=NO_MODIFIERS, g=None, sink=None):
    """(o [total_q, H, Dv], lse [1, H, total_q]) fp32 of a packed batch, document by document."""
    cu_q = [int(x) for x in packing.cu_seqlens_q.tolist()]
    cu_k = [int(x) for x in packing.cu_seqlens_k.tolist()]
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=torch.float32, device=q.device)
    lse = torch.full((1, q.shape[1], q.shape[0]), float("inf"), dtype=torch.float32, device=q.device)
    for (q0, q1), (k0, k1) in zip(zip(cu_q, cu_q[1:]), zip(cu_k, cu_k[1:])):
        if q1 == q0 or k1 == k0:
            continue
        gate = None if g is None else g[None, q0:q1]
        o_d, lse_d = reference_o_lse(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal, scale, mods, gate, sink)
        o[q0:q1], lse[:, :, q0:q1] = o_d[0], lse_d
    return o, lse


def reference_dsink(q, k, v, do, causal: bool, scale: float, sink, mods=NO_MODIFIERS, g=None) -> torch.Tensor:
    """The sink's gradient fp32 [H] of a dense batch over every batch entry and row, from the fp32 forward alone:
    dsink_h = -sum_{b, i} exp(sink_h - LSE_{b,h,i}) * delta_{b,h,i} (natural log; delta = rowsum(dO * O)), the
    derivative of variants.reference's softmax with the sink as one more column. O and the LSE come over query
    chunks (reference_o_lse); with a modifier or the gate (rows that do not chunk) in one call per batch entry and
    kv-head group, each the size of the backward gate's sliced scope."""
    if not (mods.active or g is not None):
        return _dsink(sink, *reference_o_lse(q, k, v, causal, scale, sink=sink), do).float()
    group = q.shape[2] // k.shape[2]
    dsink = torch.zeros(q.shape[2], dtype=torch.float64, device=q.device)
    for b in range(q.shape[0]):
        for h in range(k.shape[2]):
            heads = slice(h * group, (h + 1) * group)  # the query heads of kv-head h
            gate = None if g is None else g[b:b + 1, :, heads]
            o, lse = reference_o_lse(q[b:b + 1, :, heads], k[b:b + 1, :, h:h + 1], v[b:b + 1, :, h:h + 1], causal,
                                     scale, mods, gate, sink[heads])
            dsink[heads] += _dsink(sink[heads], o, lse, do[b:b + 1, :, heads])
    return dsink.float()


def _dsink(sink, o, lse, do) -> torch.Tensor:
    """fp64 [H]: -sum over b, i of exp(sink_h - LSE_{b,h,i}) * rowsum(dO * O)_{b,h,i}; o [B, Nq, H, Dv] fp32, lse
    [B, H, Nq] base 2 (finite: the sink is in every row's denominator)."""
    delta = (do.float() * o).sum(dim=-1).transpose(1, 2).double()  # [B, H, Nq]
    p_sink = torch.exp(sink.double()[None, :, None] - lse.double() * math.log(2.0))  # the sink's share of each row
    return -(p_sink * delta).sum(dim=(0, 2))
