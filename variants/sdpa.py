"""PyTorch SDPA baselines, one per backend: FlashAttention-2, cuDNN, memory-efficient (xformers)."""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right
from torch.nn.functional import scaled_dot_product_attention

from variants.base import Baseline
from variants.registry import register_variant


class _Sdpa(Baseline):
    backend: SDPBackend
    native_gqa = True  # pass enable_gqa=True; otherwise k/v are expanded inside the graph

    def supports(self, problem):
        if problem.device != "cuda":
            return "SDPA backends flash/cudnn/efficient need a CUDA device"
        if problem.dtype == torch.float32 and self.backend != SDPBackend.EFFICIENT_ATTENTION:
            return "this SDPA backend needs fp16 or bf16"
        return None

    def function(self, q, k, v, causal, scale):
        seq_q, heads = q.shape[1], q.shape[2]
        seq_k, kv_heads = k.shape[1], k.shape[2]
        q_, k_, v_ = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, N, D] views, no copies
        kwargs = {}
        if heads != kv_heads:
            if self.native_gqa:
                kwargs["enable_gqa"] = True
            else:
                k_ = k_.repeat_interleave(heads // kv_heads, dim=1)
                v_ = v_.repeat_interleave(heads // kv_heads, dim=1)
        mask, is_causal = None, False
        if causal and seq_q != seq_k:
            mask = causal_lower_right(seq_q, seq_k)  # bottom-right alignment, as the Triton variants
        else:
            is_causal = causal
        with sdpa_kernel(self.backend):
            o = scaled_dot_product_attention(q_, k_, v_, attn_mask=mask, is_causal=is_causal, scale=scale, **kwargs)
        return o.transpose(1, 2)  # [B, Nq, H, D]


@register_variant("sdpa_flash")
class SdpaFlash(_Sdpa):
    backend = SDPBackend.FLASH_ATTENTION


@register_variant("sdpa_cudnn")
class SdpaCudnn(_Sdpa):
    backend = SDPBackend.CUDNN_ATTENTION
    native_gqa = False


@register_variant("sdpa_efficient")
class SdpaEfficient(_Sdpa):
    backend = SDPBackend.EFFICIENT_ATTENTION
    native_gqa = False
