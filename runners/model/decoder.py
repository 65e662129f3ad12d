"""The model-step benchmark's model and data: a small pre-norm decoder whose attention is `attention(variant=...)`,
trained on a lag copy task (target at position t = the token at t - lag), which only attention can solve."""
import torch
from torch import nn

from runners.model.config import ModelConfig
from variants import attention

TRUTH = "fp32"  # the truth run's attention (not a design): q, k, v in fp32 through SDPA (agreement's fp32 truth)


def fp32_attention(q, k, v, causal: bool) -> torch.Tensor:
    """q [B, N, H, D], k, v [B, N, Hkv, D] -> o like q: attention computed in fp32 outside autocast (SDPA's
    memory-efficient kernel on a GPU, so a long sequence never materializes N x N scores; math on a CPU)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [SDPBackend.EFFICIENT_ATTENTION] if q.is_cuda else [SDPBackend.MATH]
    with torch.autocast(q.device.type, enabled=False), sdpa_kernel(backends):
        qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))  # [B, H, N, D]
        o = nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal,
                                                       enable_gqa=kf.shape[1] != qf.shape[1])
    return o.transpose(1, 2).to(q.dtype)


class Block(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + MLP(norm(x)). Queries have `heads` heads, keys/values `kv_heads`."""

    def __init__(self, config: ModelConfig, variant: str):
        super().__init__()
        self.variant, self.causal = variant, config.causal
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.head_dim
        self.norm1, self.norm2 = nn.LayerNorm(config.d_model), nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, (config.heads + 2 * config.kv_heads) * config.head_dim, bias=False)
        self.out = nn.Linear(config.heads * config.head_dim, config.d_model, bias=False)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(),
                                 nn.Linear(4 * config.d_model, config.d_model))

    def forward(self, x):  # x [B, N, d_model]
        batch, seq, _ = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, seq, self.heads + 2 * self.kv_heads, self.head_dim)
        q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=2)  # [B, N, H, D], [B, N, Hkv, D] x 2
        if self.variant == TRUTH:
            o = fp32_attention(q, k, v, self.causal)
        else:
            o = attention(q, k, v, causal=self.causal, variant=self.variant)  # [B, N, H, D]
        x = x + self.out(o.reshape(batch, seq, self.heads * self.head_dim))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, config: ModelConfig, variant: str):
        super().__init__()
        self.embed = nn.Embedding(config.vocab, config.d_model)
        self.position = nn.Parameter(torch.randn(config.seq, config.d_model) * 0.02)  # [N, d_model]
        self.blocks = nn.ModuleList(Block(config, variant) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab, bias=False)

    def forward(self, tokens):  # tokens [B, N] -> logits [B, N, vocab]
        x = self.embed(tokens) + self.position[:tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def set_variant(model: Decoder, variant: str) -> None:
    for block in model.blocks:
        block.variant = variant


def batch_of(config: ModelConfig, step: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [B, N], targets [B, N]) of training step `step`: the same for every design. Targets before `lag`
    are -100 (ignored)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    tokens = torch.randint(0, config.vocab, (config.batch, config.seq), generator=gen)
    targets = torch.full_like(tokens, -100)
    targets[:, config.lag:] = tokens[:, :-config.lag]
    return tokens.to(device), targets.to(device)


def autocast_dtype(config: ModelConfig):
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(config.dtype)  # None: fp32, no autocast


def loss_of(model, tokens, targets, config: ModelConfig) -> torch.Tensor:
    dtype = autocast_dtype(config)
    with torch.autocast(tokens.device.type, dtype=dtype, enabled=dtype is not None):
        logits = model(tokens)  # [B, N, vocab]
    return nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
