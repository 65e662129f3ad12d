"""The accuracy gate's scope: the whole problem, or batch 0's first kv-head group when its fp32 scores are too
large for the reference; and the slices of q-, k-, gate- and sink-shaped tensors that cut a tensor to it. Shared
by the backward gate (runners/point/measure.py) and the forward / train gates (runners/point/timed.py)."""

REF_FULL_LIMIT_BYTES = 8 * 2**30  # fp32 B*H*Nq*Nk above this: check batch 0 and the first kv-head group only
REF_CHUNK_BYTES = 2**30  # fp32 scores per reference call; longer problems are checked in query chunks


def chunk_rows(batch: int, heads: int, seq_k: int) -> int:
    """Query rows per reference call so that its fp32 scores [B, H, rows, Nk] stay under REF_CHUNK_BYTES."""
    return max(1, REF_CHUNK_BYTES // (4 * batch * heads * seq_k))


def reference_scope(q, k, limit_bytes: int | None = None) -> str:
    """"full", or "batch0-kvgroup0" when fp32 scores of the whole problem exceed limit_bytes."""
    limit_bytes = REF_FULL_LIMIT_BYTES if limit_bytes is None else limit_bytes
    batch, seq_q, heads, _ = q.shape
    return "full" if 4 * batch * heads * seq_q * k.shape[1] <= limit_bytes else "batch0-kvgroup0"


def scope_slice(q, k, scope: str):
    """(slice of q-shaped tensors, slice of k-shaped tensors) for an accuracy scope."""
    if scope == "full":
        return (lambda t: t), (lambda t: t)
    group = q.shape[2] // k.shape[2]  # query heads 0..group-1 share kv-head 0
    return (lambda t: t[:1, :, :group]), (lambda t: t[:1, :, :1])


def sliced_sink(q, q_slice, sink):
    """The sink [H] cut like q's accuracy scope (its query heads)."""
    if sink is None:
        return None
    return q_slice(sink[None, None, :, None].expand(*q.shape[:3], 1))[0, 0, :, 0]


def sliced_gate(q_slice, g):
    """The gate g [B, Nq, H] cut like q's accuracy scope (q_slice cuts dims 0 and 2 of q [B, Nq, H, D])."""
    return None if g is None else q_slice(g[..., None])[..., 0]
