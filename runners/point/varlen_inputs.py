"""Packed variable-length batches for the runner: document lengths from a distribution (conf/varlen/*.yaml),
the packed inputs, the per-document reference for the accuracy gate, and the columns a varlen row records.

    python -m runners.sweep -m varlen=lognormal tokens=65536 seq=1024,4096 variant=two_pass,fused,flex

`tokens` is the packed length; `varlen.mean_len` (null = `seq`) the mean document length.
"""
import math
import random

import torch

DISTS = ("none", "fixed", "uniform", "lognormal")


def doc_lengths(dist: str, tokens: int, mean_len: int, sigma: float = 1.0, max_len: int | None = None,
                seed: int = 0) -> tuple[int, ...]:
    """Document lengths (each >= 1) summing to exactly `tokens`; deterministic for a seed on every machine."""
    if dist not in DISTS[1:]:
        raise ValueError(f"varlen.dist must be one of {', '.join(DISTS)}, got {dist!r}")
    if mean_len < 1 or tokens < 1:
        raise ValueError(f"varlen: tokens and mean_len must be >= 1, got {tokens} and {mean_len}")
    cap = tokens if max_len is None else max(1, min(max_len, tokens))
    rng = random.Random(seed)
    mu = math.log(mean_len) - sigma * sigma / 2  # E[exp(N(mu, sigma^2))] = mean_len
    lens, total = [], 0
    while total < tokens:
        if dist == "fixed":
            n = mean_len
        elif dist == "uniform":
            n = rng.randint(1, 2 * mean_len - 1)
        else:
            n = max(1, round(math.exp(rng.gauss(mu, sigma))))
        n = min(n, cap, tokens - total)
        lens.append(n)
        total += n
    return tuple(lens)


def make_inputs(point, device: str, seed: int):
    """q [total, H, D], k [total, Hkv, D], v [total, Hkv, Dv], do [total, H, Dv] (Dv = D unless the point has
    head_dim_v) random normal in the point's dtype, and the Packing."""
    from kernels.varlen import Packing
    from variants.problem import DTYPES
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = DTYPES[point.dtype]
    total = sum(point.doc_lens)

    value_dim = getattr(point, "value_dim", point.head_dim)

    def make(heads: int, dim: int) -> torch.Tensor:
        return torch.randn(total, heads, dim, dtype=dtype, device=device, generator=gen)

    q, k = make(point.heads, point.head_dim), make(point.kv_heads, point.head_dim)
    v, do = make(point.kv_heads, value_dim), make(point.heads, value_dim)
    cu = torch.tensor([0, *_cumsum(point.doc_lens)], dtype=torch.int32, device=device)
    return q, k, v, do, Packing(cu, cu, total_q=total, total_k=total)


def _cumsum(lens):
    total = 0
    for n in lens:
        total += n
        yield total


def packed_reference_grads(q, k, v, do, causal: bool, scale: float, packing, reference_grads_fn, g=None, sink=None):
    """(dq, dk, dv) fp32 of a packed batch, then dg [total_q, H] with a forget gate g, then dsink [H] with a sink
    (fp32 [H]): `reference_grads_fn` (the runner's chunked fp32 reference, which takes g= and sink=) per document, on
    [1, n, H, D] slices. Exact: documents do not interact (the gate's cumsum restarts per document), and dsink is
    a sum over every row, so the documents' dsinks add up."""
    extra = (() if g is None else (g,)) + (() if sink is None else (sink,))
    grads = [torch.zeros(t.shape, dtype=torch.float32, device=q.device) for t in (q, k, v) + extra]
    for (q0, q1), (k0, k1) in zip(zip(packing.cu_q_host, packing.cu_q_host[1:]),
                                  zip(packing.cu_k_host, packing.cu_k_host[1:])):
        if q1 == q0 or k1 == k0:
            continue  # no pairs: zero gradients
        doc = reference_grads_fn(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], do[None, q0:q1], causal, scale,
                                 g=None if g is None else g[None, q0:q1], sink=sink)
        rows = [(q0, q1), (k0, k1), (k0, k1)] + ([(q0, q1)] if g is not None else [])
        for out, part, (start, stop) in zip(grads, doc, rows):
            out[start:stop] = part[0]
        if sink is not None:
            grads[-1] += doc[-1]  # [H]: every document's rows add to the sink's gradient
    return tuple(grads)


def columns(point) -> dict:
    """What a row records about the packing (uniform rows too, so varlen and uniform rows plot together)."""
    if point.doc_lens is None:
        return {"varlen_dist": "none", "num_docs": point.batch, "mean_doc_len": float(point.seq),
                "max_doc_len": point.seq, "tokens_total": point.batch * point.seq}
    lens = point.doc_lens
    return {"varlen_dist": point.varlen_dist, "num_docs": len(lens), "mean_doc_len": sum(lens) / len(lens),
            "max_doc_len": max(lens), "tokens_total": sum(lens)}
