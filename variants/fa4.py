"""FlashAttention-4 (the `flash-attn-4` package, imported as `flash_attn.cute`; CuTe DSL, sm90 and sm100) as a
baseline: its own forward and backward through `flash_attn_func` (q [B, N, H, D], k/v [B, Nk, Hkv, D]) and, for packed
documents, `flash_attn_varlen_func` (q [total_q, H, D] with cu_seqlens_q / cu_seqlens_k / max_seqlen_q / max_seqlen_k).

An optional extra (`pip install -e '.[fa4]'`, or scripts/fa4_install.sh on a GPU machine without a package index;
docs/fa4.md). It is imported only when a point runs it, never by `import variants`: without it every fa4 point is an
`unsupported` row that says how to install it.

What it takes, as the harness means it: causal bottom-right aligned for Nq != Nk, GQA/MQA (k/v with fewer heads, passed
as they are), the sliding window (`window_size`, None = unbounded where the harness writes -1), softcap, packed batches,
fp16/bf16, and the head dims of `_validate_head_dims` (flash_attn/cute/interface.py), a value head dim of its own
among them (sm90: both 8-256; sm100: both 8-128, or DeepSeek's 192 / 128), and the learnable sink (issue 47:
`learnable_sink`, fp32 [H], with its gradient). Not the forget gate, not fp32.
"""
import torch

from kernels.fa4_lib import MODULE  # noqa: F401 - the module name, read by tests through variants.fa4
from kernels.fa4_lib import DTYPES, NOT_INSTALLED, arch_reason, call_kwargs, cute, installed, layout, output
from variants.base import Baseline
from variants.problem import NO_MODIFIERS
from variants.registry import register_variant


def gpu_major(problem) -> int | None:
    """The major compute capability of the GPU the problem runs on (9 = sm90), or None off CUDA."""
    if problem.device != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()[0]


@register_variant("fa4")
class FlashAttention4(Baseline):
    supports_varlen = True  # flash_attn_varlen_func: cu_seqlens, causal bottom-right per document
    modifiers = ("window", "softcap")  # window_size, softcap; no forget gate
    supports_head_dim_v = True  # v [B, Nk, Hkv, Dv] as it is (kernels.fa4_lib.head_dim_reason: which pairs)
    supports_sink = True  # learnable_sink, fp32 [H]; FA4's backward gives its gradient

    def problem_reason(self, problem):
        if problem.dtype not in DTYPES:
            return f"FlashAttention-4 runs fp16 and bf16, not {problem.dtype}"
        return self.modifier_reason(problem) or self.mla_reason(problem)

    def supports(self, problem):
        reason = self.problem_reason(problem)
        if reason is not None:
            return reason
        if not installed():
            return NOT_INSTALLED
        major = gpu_major(problem)
        if major is None:
            return "FlashAttention-4 needs a CUDA GPU (sm90 or sm100)"
        return arch_reason(major, problem.head_dim, problem.value_dim)

    def function(self, q, k, v, causal, scale, mods=NO_MODIFIERS, g=None, sink=None):
        if torch.compiler.is_compiling():  # Dynamo cannot trace flash_attn_func: the opaque operator pair instead
            from variants.fa4_op import fa4_attention
            return fa4_attention(q, k, v, bool(causal), float(scale), mods.window_left, mods.window_right,
                                 float(mods.softcap), sink)[0]
        q, k, v = (layout(t) for t in (q, k, v))
        return output(cute().flash_attn_func(q, k, v, **call_kwargs(causal, scale, mods, sink)))

    def varlen_function(self, q, k, v, causal, scale, varlen, mods=NO_MODIFIERS, g=None, sink=None):
        q, k, v = (layout(t) for t in (q, k, v))
        return output(cute().flash_attn_varlen_func(
            q, k, v, cu_seqlens_q=varlen.cu_seqlens_q, cu_seqlens_k=varlen.cu_seqlens_k, max_seqlen_q=varlen.max_q,
            max_seqlen_k=varlen.max_k, **call_kwargs(causal, scale, mods, sink)))
