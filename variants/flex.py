"""FlexAttention compiled with torch.compile: the stock-Triton backward baseline.
Packed varlen batches: one sequence of total tokens with a document mask (bottom-right causal per document).
Score modifiers (issue 24) as a user would write them: the window (with causal) as a mask_mod and its block mask,
softcap and the forget gate as a score_mod (G = cumsum(g) a captured tensor, so autograd yields dg).
Issue 47: v of its own head dim goes in as it is (flex sizes O by V); a learnable sink cannot be a score_mod (it is
one more column of the softmax, with no key), so flex returns its LSE (natural log) and the output is rescaled by
the sink's share of the row, o * sigmoid(lse - sink): sum_j e^s / (e^sink + sum_j e^s) = 1 / (1 + e^(sink - lse)).
Autograd goes through that LSE into flex's backward and yields dsink."""
import functools

import torch

from variants.base import Baseline
from variants.registry import register_variant


BLOCK = 128  # FlexAttention's default sparse block size (both sides)


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention
    # Each shape is its own compiled graph (dynamic=False). Past dynamo's recompile limit (8 by default)
    # flex_attention silently falls back to an unfused version that materializes the scores: a sweep over
    # many shapes would then time (or OOM) that fallback, not FlexAttention. Raise the limits well past any sweep.
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 1024)
    torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
    return torch.compile(flex_attention, dynamic=False)


@functools.cache
def _causal_block_mask(seq_q: int, seq_k: int, device: str):
    from torch.nn.attention.flex_attention import create_block_mask
    shift = seq_k - seq_q

    def bottom_right_causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + shift

    return create_block_mask(bottom_right_causal, B=None, H=None, Q_LEN=seq_q, KV_LEN=seq_k, device=device)


def document_block_tables(cu_q: tuple, cu_k: tuple, causal: bool, block: int) -> tuple:
    """(partial, full) [n_q_blocks, n_k_blocks] bool tables of a packed batch, computed per document from its
    ranges (never the [total_q, total_k] mask): `partial` marks block pairs with some but not only visible pairs,
    `full` those whose every pair is visible. Query q of document d sees key k of d when k <= q + shift_d,
    shift_d = end of d's keys - end of d's queries (bottom-right causal per document)."""
    total_q, total_k = cu_q[-1], cu_k[-1]
    n_qb, n_kb = -(-total_q // block), -(-total_k // block)
    q_start = torch.arange(n_qb) * block                       # [n_qb]: first query of each block
    q_end = (q_start + block).clamp(max=total_q)                # [n_qb]: one past its last query
    k_start = torch.arange(n_kb) * block
    k_end = (k_start + block).clamp(max=total_k)
    any_visible = torch.zeros(n_qb, n_kb, dtype=torch.bool)
    full = torch.zeros(n_qb, n_kb, dtype=torch.bool)
    for qa, qb, ka, kb in zip(cu_q, cu_q[1:], cu_k, cu_k[1:]):
        if qa == qb or ka == kb:
            continue  # an empty side: the document has no visible pair
        shift = kb - qb
        rows = slice(qa // block, (qb - 1) // block + 1)        # the blocks this document's queries touch
        cols = slice(ka // block, (kb - 1) // block + 1)
        first_q = q_start[rows].clamp(min=qa)                   # this document's part of each query block
        last_q = q_end[rows].clamp(max=qb) - 1
        first_k = k_start[cols].clamp(min=ka)
        last_k = k_end[cols].clamp(max=kb) - 1
        visible = torch.ones(len(first_q), len(first_k), dtype=torch.bool)
        whole = ((q_start[rows] >= qa) & (q_end[rows] - q_start[rows] == block) & (q_end[rows] <= qb))[:, None] \
            & ((k_start[cols] >= ka) & (k_end[cols] - k_start[cols] == block) & (k_end[cols] <= kb))[None, :]
        if causal:
            visible = first_k[None, :] <= last_q[:, None] + shift   # the lowest key vs the highest query
            whole = whole & (last_k[None, :] <= first_q[:, None] + shift)
        any_visible[rows, cols] |= visible
        full[rows, cols] |= whole
    return any_visible & ~full, full


def _block_lists(table: torch.Tensor, device: str) -> tuple:
    """([1, 1, n_qb] counts, [1, 1, n_qb, n_kb] indices, marked blocks first): BlockMask's kv-block layout."""
    counts = table.sum(-1, dtype=torch.int32)
    indices = torch.argsort((~table).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return counts[None, None].to(device), indices[None, None].to(device)


@functools.cache
def _document_block_mask(cu_q: tuple, cu_k: tuple, causal: bool, device: str):
    """Block mask of a packed batch: query i of document d sees key j of the same document (and, causal,
    j <= i + (end of d's keys) - (end of d's queries): bottom-right aligned per document). The block tables come
    from the document ranges (document_block_tables); torch.compile'd create_block_mask spent minutes in ptxas
    on 16k tokens (H100, torch 2.11) and an eager one builds the [total_q, total_k] mask."""
    from torch.nn.attention.flex_attention import BlockMask
    lens_q = torch.tensor([b - a for a, b in zip(cu_q, cu_q[1:])], device=device)
    lens_k = torch.tensor([b - a for a, b in zip(cu_k, cu_k[1:])], device=device)
    docs = torch.arange(len(lens_q), device=device)
    doc_q = torch.repeat_interleave(docs, lens_q)  # [total_q]: document of each query
    doc_k = torch.repeat_interleave(docs, lens_k)  # [total_k]
    end_shift = torch.tensor([bk - bq for bq, bk in zip(cu_q[1:], cu_k[1:])], device=device)  # [docs]

    def document_mask(b, h, q_idx, kv_idx):
        same = doc_q[q_idx] == doc_k[kv_idx]
        if causal:
            return same & (kv_idx <= q_idx + end_shift[doc_q[q_idx]])
        return same

    partial, full = document_block_tables(cu_q, cu_k, causal, BLOCK)
    return BlockMask.from_kv_blocks(*_block_lists(partial, device), *_block_lists(full, device), BLOCK_SIZE=BLOCK,
                                    mask_mod=document_mask, seq_lengths=(cu_q[-1], cu_k[-1]))


def band_mask_mod(seq_q: int, seq_k: int, causal: bool, window_left: int, window_right: int):
    """mask_mod of bottom-right aligned causal / window attention: query i sees key j when
    i + shift - left <= j <= i + shift + right (shift = Nk - Nq; causal: right = 0; -1 = unbounded)."""
    shift = seq_k - seq_q
    right = 0 if causal else window_right

    def band(b, h, q_idx, kv_idx):
        visible = kv_idx >= 0  # all True, as a tensor
        if window_left >= 0:
            visible = visible & (kv_idx >= q_idx + shift - window_left)
        if right >= 0:
            visible = visible & (kv_idx <= q_idx + shift + right)
        return visible

    return band


def modifier_score_mod(softcap: float, gate_cumsum):
    """score_mod of softcap (s -> softcap * tanh(s / softcap)) then the gate (+ G[b, h, i] - G[b, h, j], G [B, H, N]),
    or None when neither is on."""
    if not softcap and gate_cumsum is None:
        return None
    # Two captured tensors, each indexed once: compiled flex's backward refuses two indexings of one tensor that
    # needs a gradient (Inductor's LoweringException, H100 torch 2.11); autograd sums their gradients into G's.
    gate_rows, gate_cols = (None, None) if gate_cumsum is None else (gate_cumsum, gate_cumsum.clone())

    def modify(score, b, h, q_idx, kv_idx):
        if softcap:
            score = softcap * torch.tanh(score / softcap)
        if gate_cumsum is not None:
            score = score + gate_rows[b, h, q_idx] - gate_cols[b, h, kv_idx]
        return score

    return modify


def _gate_cumsum(g, varlen=None):
    """Differentiable G [B, H, N] (packed [1, H, total]) of g [B, N, H] (packed [total, H]), per sequence / document."""
    if varlen is None:
        return g.cumsum(1).transpose(1, 2)
    parts = [g[a:b].cumsum(0) for a, b in zip(varlen.cu_q_host, varlen.cu_q_host[1:])]
    return torch.cat(parts, 0).transpose(0, 1).unsqueeze(0)


def with_sink(run, q_, k_, v_, sink=None, **kwargs):
    """run (flex_attention, compiled or not) on q_ [B, H, Nq, D], k_ [B, Hkv, Nk, D], v_ [B, Hkv, Nk, Dv] -> o
    [B, H, Nq, Dv]; with a sink (fp32 [H]) also its LSE [B, H, Nq] (natural log; -inf on a row that sees no key,
    whose o stays 0), and o * sigmoid(lse - sink) in fp32, cast back to o's dtype (module doc)."""
    if sink is None:
        return run(q_, k_, v_, **kwargs)
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:  # torch before AuxRequest: return_lse
        o, lse = run(q_, k_, v_, return_lse=True, **kwargs)
    else:
        o, aux = run(q_, k_, v_, return_aux=AuxRequest(lse=True), **kwargs)
        lse = aux.lse
    share = torch.sigmoid(lse.float() - sink.float()[None, :, None])  # [B, H, Nq]: the keys' share of the row
    return (o.float() * share[..., None]).to(o.dtype)


def modified_flex(q_, k_, v_, causal: bool, scale: float, mods, g, *, compiled: bool = True, varlen=None,
                  sink=None):
    """FlexAttention with the modifiers: q_ [B, H, Nq, D], k_ [B, Hkv, Nk, D], v_ [B, Hkv, Nk, Dv] -> o
    [B, H, Nq, Dv]. compiled=False runs flex_attention eagerly (the CPU tests). A packed batch (B = 1) adds the
    document mask; a sink (fp32 [H]): with_sink."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    seq_q, seq_k = q_.shape[2], k_.shape[2]
    windowed = mods.window_left >= 0 or mods.window_right >= 0
    mask_mod = None
    if varlen is not None:
        mask_mod = _document_band_mask(varlen, causal, mods, q_.device)
    elif causal or windowed:
        mask_mod = band_mask_mod(seq_q, seq_k, causal, mods.window_left, mods.window_right)
    block_mask = None if mask_mod is None else create_block_mask(mask_mod, B=None, H=None, Q_LEN=seq_q, KV_LEN=seq_k,
                                                                 device=q_.device.type)
    score_mod = modifier_score_mod(mods.softcap, None if g is None else _gate_cumsum(g, varlen))
    run = _compiled_flex() if compiled else flex_attention
    return with_sink(run, q_, k_, v_, sink, score_mod=score_mod, block_mask=block_mask, scale=scale,
                     enable_gqa=q_.shape[1] != k_.shape[1])


def _document_band_mask(varlen, causal: bool, mods, device):
    """mask_mod of a packed batch with a window: same document, and the band bottom-right aligned per document."""
    cu_q, cu_k = varlen.cu_q_host, varlen.cu_k_host
    docs = torch.arange(len(cu_q) - 1, device=device)
    doc_q = torch.repeat_interleave(docs, torch.tensor(varlen.lens_q, device=device))  # [total_q]
    doc_k = torch.repeat_interleave(docs, torch.tensor(varlen.lens_k, device=device))  # [total_k]
    shift = torch.tensor([bk - bq for bq, bk in zip(cu_q[1:], cu_k[1:])], device=device)  # [docs]: end_k - end_q
    right = 0 if causal else mods.window_right

    def document_band(b, h, q_idx, kv_idx):
        d = doc_q[q_idx]
        visible = d == doc_k[kv_idx]
        diagonal = q_idx + shift[d]  # the key aligned with query q_idx, in packed positions
        if mods.window_left >= 0:
            visible = visible & (kv_idx >= diagonal - mods.window_left)
        if right >= 0:
            visible = visible & (kv_idx <= diagonal + right)
        return visible

    return document_band


@register_variant("flex")
class Flex(Baseline):
    supports_varlen = True  # document mask over the packed sequence
    modifiers = ("window", "softcap", "gate")  # mask_mod + block mask, score_mod (modified_flex)
    supports_head_dim_v = True  # flex sizes O by V's head dim (the power-of-two rule below holds for both)
    supports_sink = True  # the sink through flex's LSE (with_sink)

    def supports(self, problem):
        if self.modifier_reason(problem) or self.mla_reason(problem):
            return self.modifier_reason(problem) or self.mla_reason(problem)
        if problem.device != "cuda":
            return "compiled FlexAttention is benchmarked on CUDA only"
        for name, dim in (("head dim", problem.head_dim), ("value head dim", problem.value_dim)):
            if dim < 16 or dim & (dim - 1):
                return f"FlexAttention needs a power-of-two {name} >= 16, got {dim}"
        return None

    def function(self, q, k, v, causal, scale, mods=None, g=None, sink=None):
        q_, k_, v_ = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, N, D] views
        if mods is not None:
            return modified_flex(q_, k_, v_, causal, scale, mods, g, sink=sink).transpose(1, 2)
        block_mask = _causal_block_mask(q.shape[1], k.shape[1], q.device.type) if causal else None
        o = with_sink(_compiled_flex(), q_, k_, v_, sink, block_mask=block_mask, scale=scale,
                      enable_gqa=q.shape[2] != k.shape[2])
        return o.transpose(1, 2)

    def varlen_function(self, q, k, v, causal, scale, varlen, mods=None, g=None, sink=None):
        q_, k_, v_ = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))  # [1, H, total, D] views
        if mods is not None:
            o = modified_flex(q_, k_, v_, causal, scale, mods, g, varlen=varlen, sink=sink)
            return o.squeeze(0).transpose(0, 1)  # [total_q, H, Dv]
        block_mask = _document_block_mask(varlen.cu_q_host, varlen.cu_k_host, causal, q.device.type)
        o = with_sink(_compiled_flex(), q_, k_, v_, sink, block_mask=block_mask, scale=scale,
                      enable_gqa=q.shape[1] != k.shape[1])
        return o.squeeze(0).transpose(0, 1)  # [total_q, H, Dv]
