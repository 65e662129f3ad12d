"""The argument block every backward kernel takes, built once from tensors."""
from kernels.common import LOG2E
from kernels.forward import strides


def backward_args(q, k, v, do, dq, dk, dv, lse, delta, scale: float) -> tuple:
    """Pointers, then [B, N, H, D] strides of q, k, v, do, dq, dk, dv, then sizes and scales.

    Matches the leading parameters of every backward kernel:
    (Q, K, V, DO, DQ, DK, DV, LSE, DELTA, 7 x 4 strides, seq_q, seq_k, heads, kv_heads, qk_scale, sm_scale).
    """
    batch, seq_q, heads, _ = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    return (q, k, v, do, dq, dk, dv, lse, delta,
            *strides(q), *strides(k), *strides(v), *strides(do), *strides(dq), *strides(dk), *strides(dv),
            seq_q, seq_k, heads, kv_heads, scale * LOG2E, scale)
