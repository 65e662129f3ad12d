"""One attention problem: shapes, dtype, device, and its FLOP counts (FlashAttention convention)."""
from dataclasses import dataclass

import torch

from spec import DTYPE_NAMES, MAX_HEAD_DIM

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
DTYPES = {name: _TORCH_DTYPES[name] for name in DTYPE_NAMES}  # name -> torch dtype


@dataclass(frozen=True)
class Problem:
    batch: int
    seq_q: int
    seq_k: int
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool
    dtype: torch.dtype
    device: str  # "cuda" or "cpu"

    @classmethod
    def from_tensors(cls, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> "Problem":
        """q [B, Nq, H, D], k/v [B, Nk, Hkv, D]; raises ValueError (one line) on anything inconsistent."""
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 4:
                raise ValueError(f"{name} must be 4-D [B, N, H, D], got shape {tuple(t.shape)}")
        if k.shape != v.shape:
            raise ValueError(f"k and v shapes differ: {tuple(k.shape)} vs {tuple(v.shape)}")
        if q.dtype != k.dtype or q.dtype != v.dtype:
            raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
        if q.device != k.device or q.device != v.device:
            raise ValueError(f"q, k, v devices differ: {q.device}, {k.device}, {v.device}")
        batch, seq_q, heads, head_dim = q.shape
        kv_batch, seq_k, kv_heads, kv_head_dim = k.shape
        if kv_batch != batch:
            raise ValueError(f"batch differs: q has {batch}, k/v have {kv_batch}")
        if kv_head_dim != head_dim:
            raise ValueError(f"head dim differs: q has {head_dim}, k/v have {kv_head_dim}")
        problem = cls(batch, seq_q, seq_k, heads, kv_heads, head_dim, bool(causal), q.dtype, q.device.type)
        problem.validate()
        return problem

    def validate(self) -> None:
        for name in ("batch", "seq_q", "seq_k", "heads", "kv_heads", "head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim > MAX_HEAD_DIM:
            raise ValueError(f"head_dim must be <= {MAX_HEAD_DIM}, got {self.head_dim}")
        if self.dtype not in DTYPES.values():
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype}")

    @property
    def visible_pairs(self) -> float:
        """(query, key) pairs per head that the FLOP convention counts: Nq*Nk, halved when causal
        with Nq == Nk (FlashAttention's convention), counted exactly when causal with Nq != Nk."""
        if not self.causal:
            return float(self.seq_q * self.seq_k)
        if self.seq_q == self.seq_k:
            return self.seq_q * self.seq_k / 2.0
        shift = self.seq_k - self.seq_q  # query i sees min(Nk, max(0, i + shift + 1)) keys
        rows = torch.arange(self.seq_q, dtype=torch.float64)
        return float((rows + shift + 1).clamp(0, self.seq_k).sum())

    def forward_flops(self) -> float:
        """4 * B * H * pairs * D: the two matmuls QK^T and PV."""
        return 4.0 * self.batch * self.heads * self.visible_pairs * self.head_dim

    def backward_flops(self) -> float:
        """FlashAttention convention: backward = 2.5 x forward (5 matmuls vs 2)."""
        return 2.5 * self.forward_flops()

    def matmul_flops(self, matmuls: int) -> float:
        """FLOPs of `matmuls` [pair x D] matmuls over every counted pair: 2 * D each."""
        return 2.0 * matmuls * self.batch * self.heads * self.visible_pairs * self.head_dim
