"""PyTorch SDPA baselines, one per backend: FlashAttention-2, cuDNN, memory-efficient (xformers).

Packed varlen batches go through the varlen entry points behind SDPA (what torch.nn.attention.varlen and
nested-tensor SDPA call): torch.ops.aten._flash_attention_forward / _backward (FlashAttention-2 varlen) and
torch.ops.aten._cudnn_attention_forward / _backward with cum_seq_q / cum_seq_k (cuDNN's ragged path).
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention

from variants.base import Baseline
from variants.registry import register_variant


def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


class _VarlenOps(torch.autograd.Function):
    """o = the backend's varlen forward; backward = the backend's varlen backward (both aten ops).
    q [total_q, H, D], k/v [total_k, Hkv, D] contiguous, cu_seqlens int32."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, packing, backend):
        cu_q, cu_k, max_q, max_k = packing.cu_seqlens_q, packing.cu_seqlens_k, packing.max_q, packing.max_k
        if backend == "flash":
            o, lse, rng_state, unused, _ = torch.ops.aten._flash_attention_forward(
                q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, False, scale=scale)
            ctx.extra = (rng_state, unused)
        else:
            o, lse, _, _, _, _, seed, offset, _ = torch.ops.aten._cudnn_attention_forward(
                q, k, v, None, cu_q, cu_k, max_q, max_k, True, 0.0, causal, False, scale=scale)
            ctx.extra = (seed, offset)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.packing, ctx.backend = causal, scale, packing, backend
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        p = ctx.packing
        if ctx.backend == "flash":
            rng_state, unused = ctx.extra
            dq, dk, dv = torch.ops.aten._flash_attention_backward(
                do.contiguous(), q, k, v, o, lse, p.cu_seqlens_q, p.cu_seqlens_k, p.max_q, p.max_k, 0.0, ctx.causal,
                rng_state, unused, scale=ctx.scale)
        else:
            seed, offset = ctx.extra
            dq, dk, dv = torch.ops.aten._cudnn_attention_backward(
                do.contiguous(), q, k, v, o, lse, seed, offset, None, p.cu_seqlens_q, p.cu_seqlens_k, p.max_q,
                p.max_k, 0.0, ctx.causal, scale=ctx.scale)
        return dq, dk, dv, None, None, None, None


class SdpaBackend(Baseline):
    """One SDPA backend (flash, cuDNN, efficient) as a baseline; public so callers can ask which baselines are SDPA."""
    backend: SDPBackend
    native_gqa = True  # pass enable_gqa=True; otherwise k/v are expanded inside the graph
    varlen_op: str | None = None  # "flash" / "cudnn": the aten varlen op pair behind this backend

    supports_head_dim_v = False  # per backend below: cuDNN and the efficient kernel take v of its own head dim

    def supports(self, problem):
        if problem.modifiers:  # SDPA has no window, softcap or gate (an attn_mask would leave the fused kernels)
            return self.modifier_reason(problem)
        if problem.sink:  # an attn_mask cannot add a column to the denominator
            return f"{self.name}: SDPA has no learnable attention sink"
        if problem.value_dim != problem.head_dim and (not self.supports_head_dim_v or problem.is_varlen):
            return self.mla_reason(problem) or (f"{self.name}: a value head dim of its own is wired for dense "
                                                "batches only")
        if problem.device != "cuda":
            return "SDPA backends flash/cudnn/efficient need a CUDA device"
        if problem.dtype == torch.float32 and self.backend != SDPBackend.EFFICIENT_ATTENTION:
            return "this SDPA backend needs fp16 or bf16"
        if problem.is_varlen:
            return self.varlen_op_reason()
        return None

    def varlen_op_reason(self) -> str | None:
        if self.varlen_op is None:
            return (f"{self.name}: packed varlen batches are not wired for this backend (torch has no public "
                    "varlen backward for it; use sdpa_flash / sdpa_cudnn)")
        missing = [n for n in (f"_{self.varlen_op}_attention_forward", f"_{self.varlen_op}_attention_backward")
                   if not hasattr(torch.ops.aten, n)]
        if missing:
            return f"this torch ({torch.__version__}) has no torch.ops.aten.{' / '.join(missing)}"
        return self.known_varlen_bug()

    def known_varlen_bug(self) -> str | None:
        """A reason when this torch's varlen op pair is known to give wrong gradients, else None."""
        return None

    @property
    def supports_varlen(self) -> bool:
        return self.varlen_op is not None

    def varlen_function(self, q, k, v, causal, scale, varlen):
        heads, kv_heads = q.shape[1], k.shape[1]
        if heads != kv_heads and not self.native_gqa:  # expanded inside the graph: autograd sums the group
            k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
        return _VarlenOps.apply(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale, varlen, self.varlen_op)

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
            from torch.nn.attention.bias import causal_lower_right  # imports dynamo (seconds): only when used

            mask = causal_lower_right(seq_q, seq_k)  # bottom-right alignment, as the Triton variants
        else:
            is_causal = causal
        with sdpa_kernel(self.backend):
            o = scaled_dot_product_attention(q_, k_, v_, attn_mask=mask, is_causal=is_causal, scale=scale, **kwargs)
        return o.transpose(1, 2)  # [B, Nq, H, D]


@register_variant("sdpa_flash")
class SdpaFlash(SdpaBackend):
    backend = SDPBackend.FLASH_ATTENTION
    varlen_op = "flash"  # FlashAttention-2 varlen (GQA native)


@register_variant("sdpa_cudnn")
class SdpaCudnn(SdpaBackend):
    backend = SDPBackend.CUDNN_ATTENTION
    native_gqa = False
    supports_head_dim_v = True  # cuDNN's SDPA takes d_v != d_qk (MLA's 192 / 128)
    varlen_op = "cudnn"  # cuDNN's ragged (nested-tensor) path
    last_torch_with_varlen_bug = (2, 11)  # measured wrong on an H100 with 2.11; newer ones: the accuracy gate decides

    def known_varlen_bug(self) -> str | None:
        if torch_version() > self.last_torch_with_varlen_bug:
            return None
        return (f"torch {torch.__version__}: aten._cudnn_attention_backward on packed inputs sizes its dQ accumulator "
                "from query.size(2), the head dim, not max_seqlen_q (pytorch/pytorch#186142): dQ is wrong "
                "(measured rel_dq 2.3-2.8, or NaN, on an H100 with torch 2.11)")


@register_variant("sdpa_efficient")
class SdpaEfficient(SdpaBackend):
    backend = SDPBackend.EFFICIENT_ATTENTION
    native_gqa = False
    supports_head_dim_v = True  # the memory-efficient kernel takes d_v != d_qk
