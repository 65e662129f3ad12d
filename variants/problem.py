"""One attention problem: shapes, dtype, device, and its FLOP counts (FlashAttention convention)."""
import dataclasses
from dataclasses import dataclass

import torch

from spec import DTYPE_NAMES, MAX_HEAD_DIM

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
DTYPES = {name: _TORCH_DTYPES[name] for name in DTYPE_NAMES}  # name -> torch dtype


@dataclass(frozen=True)
class Modifiers:
    """The window and softcap of a call, as normalized by window_pair (Problem.mods); all off by default."""
    window_left: int = -1
    window_right: int = -1
    softcap: float = 0.0

    @property
    def active(self) -> bool:
        return self.window_left >= 0 or self.window_right >= 0 or self.softcap > 0


NO_MODIFIERS = Modifiers()


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
    # A packed varlen batch: per-document query / key lengths (batch = documents, seq_q / seq_k = the longest).
    lens_q: tuple[int, ...] | None = None
    lens_k: tuple[int, ...] | None = None
    # Score modifiers (issue 24), all off by default. A sliding window as FlashAttention's window_size: query i sees
    # key j when i + Nk - Nq - window_left <= j <= i + Nk - Nq + window_right (-1 = unbounded; causal: right = 0).
    window_left: int = -1
    window_right: int = -1
    softcap: float = 0.0  # > 0: the scaled score s becomes softcap * tanh(s / softcap) before the softmax
    gate: bool = False  # FLA's log forget gate g [B, Nq, H]: the score gets + G_i - G_j, G = cumsum(g) per sequence
    # Issue 47: a value head dim of its own (None = head_dim; MLA: head_dim 192, head_dim_v 128) and a learnable
    # per-head sink (GPT-OSS): one logit per query head that joins every row's softmax denominator.
    head_dim_v: int | None = None
    sink: bool = False

    def with_modifiers(self, window_size=None, softcap: float = 0.0, gate: bool = False) -> "Problem":
        """This problem with score modifiers (window_size (left, right) or None, softcap, gate), validated."""
        left, right = window_pair(window_size, self.causal)
        problem = dataclasses.replace(self, window_left=left, window_right=right, softcap=float(softcap),
                                      gate=bool(gate))
        problem.validate()
        return problem

    def with_sink(self, sink: bool) -> "Problem":
        """This problem with (or without) a per-head sink."""
        return dataclasses.replace(self, sink=bool(sink))

    @property
    def value_dim(self) -> int:
        """The head dim of V, dO, O and dV: head_dim_v, or head_dim when they are equal."""
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    @property
    def windowed(self) -> bool:
        """A sliding window bounds at least one side (window_pair leaves causal alone as (-1, -1))."""
        return self.window_left >= 0 or self.window_right >= 0

    @property
    def mods(self) -> "Modifiers":
        """The score modifiers the kernels take (the gate travels as its tensor)."""
        return Modifiers(self.window_left, self.window_right, self.softcap)

    @property
    def modifiers(self) -> tuple[str, ...]:
        """The score modifiers this problem uses, of 'window', 'softcap', 'gate' (() for plain attention)."""
        used = (("window", self.windowed), ("softcap", self.softcap > 0), ("gate", self.gate))
        return tuple(name for name, on in used if on)

    @classmethod
    def from_tensors(cls, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> "Problem":
        """q [B, Nq, H, D], k [B, Nk, Hkv, D], v [B, Nk, Hkv, Dv] (Dv may differ from D: head_dim_v); raises
        ValueError (one line) on anything inconsistent."""
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 4:
                raise ValueError(f"{name} must be 4-D [B, N, H, D], got shape {tuple(t.shape)}")
        if k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"k and v shapes differ (other than the head dim): {tuple(k.shape)} vs {tuple(v.shape)}")
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
        head_dim_v = v.shape[-1] if v.shape[-1] != head_dim else None
        problem = cls(batch, seq_q, seq_k, heads, kv_heads, head_dim, bool(causal), q.dtype, q.device.type,
                      head_dim_v=head_dim_v)
        problem.validate()
        return problem

    @classmethod
    def from_packed(cls, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, packing) -> "Problem":
        """A packed varlen batch: q [total_q, H, D], k/v [total_k, Hkv, D] and a kernels.varlen.Packing whose
        cu_seqlens end at total_q / total_k; raises ValueError (one line) on anything inconsistent."""
        problem = cls.from_packed_tensors(q, k, v, causal)
        if packing.cu_q_host[-1] != q.shape[0] or packing.cu_k_host[-1] != k.shape[0]:
            raise ValueError(f"cu_seqlens end at {packing.cu_q_host[-1]} (q) / {packing.cu_k_host[-1]} (k), "
                             f"but q has {q.shape[0]} and k has {k.shape[0]} tokens")
        packed = cls.packed(packing.lens_q, packing.lens_k, problem.heads, problem.kv_heads, problem.head_dim,
                            problem.causal, problem.dtype, problem.device)
        return dataclasses.replace(packed, head_dim_v=problem.head_dim_v)

    @classmethod
    def from_packed_tensors(cls, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> "Problem":
        """q [total_q, H, D], k/v [total_k, Hkv, D] checked as one sequence each, before any cu_seqlens is read;
        raises ValueError (one line) on anything inconsistent."""
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 3:
                raise ValueError(f"with cu_seqlens, {name} must be 3-D [total, H, D], got shape {tuple(t.shape)}")
        return cls.from_tensors(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), causal)

    @classmethod
    def packed(cls, lens_q, lens_k, heads: int, kv_heads: int, head_dim: int, causal: bool, dtype, device: str):
        """The problem of a packed batch of documents with these query / key lengths."""
        lens_q, lens_k = tuple(int(n) for n in lens_q), tuple(int(n) for n in lens_k)
        if len(lens_q) != len(lens_k) or not lens_q:
            raise ValueError(f"need the same number (>= 1) of query and key document lengths, got "
                             f"{len(lens_q)} and {len(lens_k)}")
        problem = cls(len(lens_q), max(lens_q), max(lens_k), heads, kv_heads, head_dim, bool(causal), dtype, device,
                      lens_q, lens_k)
        problem.validate()
        return problem

    @property
    def is_varlen(self) -> bool:
        return self.lens_q is not None

    @property
    def tokens_q(self) -> int:
        """Query tokens in the batch (B * Nq, or the packed length)."""
        return sum(self.lens_q) if self.is_varlen else self.batch * self.seq_q

    @property
    def tokens_k(self) -> int:
        """Key tokens in the batch (B * Nk, or the packed length)."""
        return sum(self.lens_k) if self.is_varlen else self.batch * self.seq_k

    def validate(self) -> None:
        if self.is_varlen and min(self.lens_q + self.lens_k) < 0:
            raise ValueError("document lengths must be >= 0")
        for name in ("batch", "seq_q", "seq_k", "heads", "kv_heads", "head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim > MAX_HEAD_DIM:
            raise ValueError(f"head_dim must be <= {MAX_HEAD_DIM}, got {self.head_dim}")
        if self.head_dim_v is not None and not 1 <= self.head_dim_v <= MAX_HEAD_DIM:
            raise ValueError(f"head_dim_v must be in 1..{MAX_HEAD_DIM}, got {self.head_dim_v}")
        if self.dtype not in DTYPES.values():
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype}")
        self.validate_modifiers()

    def validate_modifiers(self) -> None:
        for name in ("window_left", "window_right"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < -1:
                raise ValueError(f"window_size entries must be ints >= -1 (-1 = unbounded), got {name}="
                                 f"{getattr(self, name)!r}")
        if not self.softcap >= 0:  # NaN too
            raise ValueError(f"softcap must be >= 0 (0 = off), got {self.softcap}")
        if self.gate and not self.causal:
            raise ValueError("the forget gate g needs causal=True (FLA's parallel_attn)")
        if self.gate and (self.lens_q != self.lens_k if self.is_varlen else self.seq_q != self.seq_k):
            raise ValueError(f"the forget gate g needs Nq == Nk (per document when packed), got "
                             f"{self.lens_q or self.seq_q} and {self.lens_k or self.seq_k}")

    @property
    def modifier_text(self) -> str:
        """The score modifiers as a row shows them: 'window=1024,0 softcap=30 gate'; '' for plain attention. Issue 47
        adds a value head dim of its own ('dv=128') and the sink ('sink'): the row's `modifiers` column is a shape
        column (runners/tables), so such a row never joins, plots or ranks with a plain one."""
        parts = [f"window={self.window_left},{self.window_right}"] if self.windowed else []
        parts += [f"softcap={self.softcap:g}"] if self.softcap > 0 else []
        parts += ["gate"] if self.gate else []
        parts += [f"dv={self.value_dim}"] if self.value_dim != self.head_dim else []
        parts += ["sink"] if self.sink else []
        return " ".join(parts)

    @property
    def visible_pairs(self) -> float:
        """(query, key) pairs per head that the FLOP convention counts: Nq*Nk, halved when causal
        with Nq == Nk (FlashAttention's convention), counted exactly when causal with Nq != Nk and when a
        sliding window bounds the keys (as FlashAttention's benchmarks count local attention).
        A packed batch: the mean over its documents (total_pairs / documents)."""
        if self.is_varlen:
            return self.total_pairs / self.batch
        return pair_count(self.seq_q, self.seq_k, self.causal, self.window_left, self.window_right)

    @property
    def total_pairs(self) -> float:
        """Counted pairs per head over the whole batch: B * visible_pairs, or the sum over the documents
        (causal and windows counted per document, with the same convention)."""
        if self.is_varlen:
            return float(sum(pair_count(nq, nk, self.causal, self.window_left, self.window_right)
                             for nq, nk in zip(self.lens_q, self.lens_k)))
        return self.batch * self.visible_pairs

    def forward_flops(self) -> float:
        """2 * B * H * pairs * (D + Dv): the two matmuls QK^T (D) and PV (Dv); 4 * B * H * pairs * D when equal."""
        return 2.0 * self.heads * self.total_pairs * (self.head_dim + self.value_dim)

    def backward_flops(self) -> float:
        """FlashAttention convention, with D = d_qk and Dv = d_v: 2 * B * H * pairs * (3 D + 2 Dv) for the five
        matmuls S = QK^T, dQ, dK (D) and dP = dO V^T, dV (Dv); 2.5 x forward when D == Dv."""
        return 2.0 * self.heads * self.total_pairs * (3 * self.head_dim + 2 * self.value_dim)

    def matmul_flops(self, matmuls: int, value_matmuls: int = 0) -> float:
        """FLOPs of `matmuls` matmuls over every counted pair, `value_matmuls` of them over V's head dim (dP = dO V^T,
        dV = P^T dO: 2 * Dv each) and the rest over D (S, dQ, dK: 2 * D each)."""
        dims = (matmuls - value_matmuls) * self.head_dim + value_matmuls * self.value_dim
        return 2.0 * self.heads * self.total_pairs * dims


def window_pair(window_size, causal: bool) -> tuple[int, int]:
    """FlashAttention's window_size (left, right), -1 = unbounded, None = (-1, -1); with causal, right = 0 (as
    FlashAttention sets it). One-line ValueError on anything but two ints >= -1."""
    if window_size is None:
        return -1, -1
    if isinstance(window_size, (str, bytes)) or len(window_size) != 2 or \
            not all(isinstance(w, int) and not isinstance(w, bool) for w in window_size):
        raise ValueError(f"window_size must be two ints (left, right), -1 = unbounded, got {window_size!r}")
    left, right = (int(w) for w in window_size)
    if left < -1 or right < -1:
        raise ValueError(f"window_size entries must be >= -1 (-1 = unbounded), got {(left, right)}")
    if causal:  # right = 0; a causal window unbounded on the left is plain causal attention: no window at all
        return (left, 0) if left >= 0 else (-1, -1)
    return left, right


def pair_count(seq_q: int, seq_k: int, causal: bool, window_left: int = -1, window_right: int = -1) -> float:
    """Counted (query, key) pairs of one sequence and head: Nq*Nk, halved when causal with Nq == Nk
    (FlashAttention's convention), counted exactly when causal with Nq != Nk (bottom-right aligned) and when a
    window (left, right; -1 = unbounded) bounds the keys: the visible pairs, as FlashAttention's benchmarks count
    local attention."""
    windowed = window_left >= 0 or window_right >= 0
    if not causal and not windowed:
        return float(seq_q * seq_k)
    if causal and seq_q == seq_k and not windowed:
        return seq_q * seq_k / 2.0
    right = 0 if causal else window_right
    diagonal = torch.arange(seq_q, dtype=torch.float64) + (seq_k - seq_q)  # [Nq]: the key aligned with query i
    first = (diagonal - window_left).clamp(min=0) if window_left >= 0 else torch.zeros_like(diagonal)
    last = (diagonal + right).clamp(max=seq_k - 1) if right >= 0 else torch.full_like(diagonal, seq_k - 1)
    return float((last - first + 1).clamp(min=0).sum())


def check_gate(g, q) -> None:
    """The forget gate of q [B, Nq, H, D] (packed: [total_q, H, D]) must be fp32 [B, Nq, H] (packed: [total_q, H])
    on q's device; one-line ValueError otherwise."""
    want = tuple(q.shape[:-1])
    _check_fp32_like_q(g, q, want, "the forget gate g", f"{want} (q without its head dim)")


def check_sink(sink, q) -> None:
    """The learnable sink of q [B, Nq, H, D] (packed: [total_q, H, D]) must be fp32 [H] on q's device (issue 47);
    one-line ValueError otherwise."""
    heads = q.shape[-2]
    _check_fp32_like_q(sink, q, (heads,), "the sink", f"({heads},) (one logit per query head)")


def _check_fp32_like_q(t, q, want: tuple, name: str, shape_text: str) -> None:
    """t must be an fp32 tensor of shape `want` on q's device: one-line ValueError naming `name` otherwise."""
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != want:
        got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name} must have shape {shape_text}, got {got}")
    if t.dtype != torch.float32:
        raise ValueError(f"{name} must be fp32, got {t.dtype}")
    if t.device != q.device:
        raise ValueError(f"{name} is on {t.device}, q on {q.device}")
