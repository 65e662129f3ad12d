"""The learnable sink's gradient (issue 47), a reduction beside the delta preprocess.

A sink s_h joins row i's softmax denominator with weight p_i = exp(s_h - LSE_i) and no value, so
dL/ds_h = sum_i p_i * (0 - delta_i) = -sum_i exp(s_h - LSE_i) * delta_i over every row of head h (every batch
entry, every query). The kernels keep LSE in base 2 (LSE2 = LSE * log2(e)), so p_i = exp2(s_h * log2(e) - LSE2_i).
A torch reduction, not a kernel: it reads two [B, H, Nq] fp32 tensors once, as the delta preprocess does.
"""
import torch

from kernels.common import LOG2E


def sink_grad(sink: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """sink fp32 [H], lse (base 2) and delta [B, H, Nq] fp32 (packed: [1, H, total_q]) -> dsink fp32 [H]."""
    p_sink = torch.exp2(sink.float()[None, :, None] * LOG2E - lse)  # [B, H, Nq]: the sink's probability per row
    return -(p_sink * delta).sum(dim=(0, 2))  # [H]


def sink_logits2(sink: torch.Tensor | None) -> torch.Tensor | None:
    """The sink in the forward's base-2 score units (fp32 [H], contiguous), or None."""
    return None if sink is None else (sink.float() * LOG2E).contiguous()
