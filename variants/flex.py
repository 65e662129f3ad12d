"""FlexAttention compiled with torch.compile: the stock-Triton backward baseline.
Packed varlen batches: one sequence of total tokens with a document mask (bottom-right causal per document)."""
import functools

import torch

from variants.base import Baseline
from variants.registry import register_variant


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


@functools.cache
def _document_block_mask(cu_q: tuple, cu_k: tuple, causal: bool, device: str):
    """Block mask of a packed batch: query i of document d sees key j of the same document (and, causal,
    j <= i + (end of d's keys) - (end of d's queries): bottom-right aligned per document)."""
    from torch.nn.attention.flex_attention import create_block_mask
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

    import inspect
    compile_kw = {"_compile": True} if "_compile" in inspect.signature(create_block_mask).parameters else {}
    return create_block_mask(document_mask, B=None, H=None, Q_LEN=cu_q[-1], KV_LEN=cu_k[-1], device=device,
                             **compile_kw)  # _compile: never materializes the [total_q, total_k] mask


@register_variant("flex")
class Flex(Baseline):
    supports_varlen = True  # document mask over the packed sequence

    def supports(self, problem):
        if problem.device != "cuda":
            return "compiled FlexAttention is benchmarked on CUDA only"
        if problem.head_dim < 16 or problem.head_dim & (problem.head_dim - 1):
            return f"FlexAttention needs a power-of-two head dim >= 16, got {problem.head_dim}"
        return None

    def function(self, q, k, v, causal, scale):
        q_, k_, v_ = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, N, D] views
        block_mask = _causal_block_mask(q.shape[1], k.shape[1], q.device.type) if causal else None
        o = _compiled_flex()(q_, k_, v_, block_mask=block_mask, scale=scale, enable_gqa=q.shape[2] != k.shape[2])
        return o.transpose(1, 2)

    def varlen_function(self, q, k, v, causal, scale, varlen):
        q_, k_, v_ = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))  # [1, H, total, D] views
        block_mask = _document_block_mask(varlen.cu_q_host, varlen.cu_k_host, causal, q.device.type)
        o = _compiled_flex()(q_, k_, v_, block_mask=block_mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
        return o.squeeze(0).transpose(0, 1)  # [total_q, H, D]
