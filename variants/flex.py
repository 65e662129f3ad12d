"""FlexAttention compiled with torch.compile: the stock-Triton backward baseline."""
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


@register_variant("flex")
class Flex(Baseline):
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
