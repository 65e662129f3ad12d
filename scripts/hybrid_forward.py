"""Which half of a design drifts in training: runners.model_step with every Triton design's forward swapped for
PyTorch's FlashAttention-2 forward (O and its log-sum-exp, turned into base 2), the design's own backward kept.

    python scripts/hybrid_forward.py model=gpt_d128 seq=16384 variant=two_pass,ws compile=eager results_dir=...

Arguments are runners.model_step's. The rows look like any model-step rows; name the sweep (sweep_id=...) so that
they are not mistaken for the designs' own. If the designs' loss curves come back within the baseline's spread with
this forward, the drift came from the shared Triton forward, not from the backward kernels.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from variants.base import TritonVariant  # noqa: E402


def flash_forward(self, q, k, v, causal, scale, varlen=None, mods=None, g=None):
    """(o [B, Nq, H, D], lse [B, H, Nq] fp32 base 2) from aten's FlashAttention-2 forward (dense, no modifiers)."""
    if varlen is not None or g is not None:
        raise ValueError("hybrid_forward: dense problems without a gate only")
    out = torch.ops.aten._scaled_dot_product_flash_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.0, causal, False, scale=scale)
    o, lse = out[0], out[1]  # [B, H, Nq, D], [B, H, Nq] natural log
    return o.transpose(1, 2), (lse * (1 / math.log(2))).float().contiguous()


if __name__ == "__main__":
    TritonVariant.forward = flash_forward
    from runners import model_step
    sys.exit(model_step.main())
