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
import importlib
import importlib.util
import sys
from pathlib import Path

import torch

from variants.base import Baseline
from variants.problem import NO_MODIFIERS
from variants.registry import register_variant

MODULE = "flash_attn.cute"
NOT_INSTALLED = ("flash-attn-4 not installed: pip install -e '.[fa4]' (GPU machine without an index: "
                 "scripts/fa4_install.sh, docs/fa4.md)")
DTYPES = (torch.float16, torch.bfloat16)
ARCHS = {9: "sm90", 10: "sm100"}  # major compute capability -> the FA4 backward it runs


def installed() -> bool:
    """Whether flash_attn.cute can be imported, found without importing it (nor flash_attn, which may be FA2)."""
    if MODULE in sys.modules:
        return True
    try:
        spec = importlib.util.find_spec("flash_attn")  # the top-level package is located, not imported
    except (ImportError, ValueError):
        return False
    roots = () if spec is None else spec.submodule_search_locations or ()
    return any((Path(root) / "cute" / "__init__.py").is_file() for root in roots)


def cute():
    """The flash_attn.cute module (imported on the first point that runs fa4)."""
    return importlib.import_module(MODULE)


def gpu_major(problem) -> int | None:
    """The major compute capability of the GPU the problem runs on (9 = sm90), or None off CUDA."""
    if problem.device != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()[0]


def head_dim_reason(head_dim: int, major: int, head_dim_v: int | None = None) -> str | None:
    """FA4's head-dim rule (its _validate_head_dims, fp16/bf16: multiples of 8) for q/k of head_dim and v of
    head_dim_v (None: the same). sm90: each 8-256; sm100: each 8-128, or (256, 256), or DeepSeek's (192, 128)."""
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    dims = (head_dim, head_dim_v)
    if all(d % 8 == 0 for d in dims):
        if major == 9 and all(8 <= d <= 256 for d in dims):
            return None
        if major == 10 and (all(8 <= d <= 128 for d in dims) or dims in ((256, 256), (192, 128))):
            return None
    rule = "8-256" if major == 9 else "8-128, 256 or (192, 128)"
    shown = head_dim if head_dim_v == head_dim else f"{head_dim} / {head_dim_v}"
    return f"FlashAttention-4 on {ARCHS[major]} takes head dims {rule} in multiples of 8, not {shown}"


def window_arg(mods) -> tuple:
    """FA4's window_size of the harness's (left, right): None where the harness writes -1 (unbounded). FA4 drops a
    pair whose sum is negative, so (-1, 0) passed as it is would be no window at all rather than causal."""
    return tuple(None if w < 0 else w for w in (mods.window_left, mods.window_right))


def output(result) -> torch.Tensor:
    """o of what FA4 returns: `out`, or `(out, lse)` in the versions that always return the LSE."""
    return result[0] if isinstance(result, (tuple, list)) else result


def layout(t: torch.Tensor) -> torch.Tensor:
    """t as FA4's kernels read it: [..., N, H, D] with the head dim contiguous (a [B, H, N, D] input's transposed
    view already is one; only a strided head dim is copied)."""
    return t if t.stride(-1) == 1 else t.contiguous()


@register_variant("fa4")
class FlashAttention4(Baseline):
    supports_varlen = True  # flash_attn_varlen_func: cu_seqlens, causal bottom-right per document
    modifiers = ("window", "softcap")  # window_size, softcap; no forget gate
    supports_head_dim_v = True  # v [B, Nk, Hkv, Dv] as it is (head_dim_reason: which pairs)
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
        if major not in ARCHS:
            return f"FlashAttention-4 runs on sm90 and sm100 here, not on compute capability {major}.x"
        return head_dim_reason(problem.head_dim, major, problem.value_dim)

    def function(self, q, k, v, causal, scale, mods=NO_MODIFIERS, g=None, sink=None):
        q, k, v = (layout(t) for t in (q, k, v))
        return output(cute().flash_attn_func(q, k, v, **call_kwargs(causal, scale, mods, sink)))

    def varlen_function(self, q, k, v, causal, scale, varlen, mods=NO_MODIFIERS, g=None, sink=None):
        q, k, v = (layout(t) for t in (q, k, v))
        return output(cute().flash_attn_varlen_func(
            q, k, v, cu_seqlens_q=varlen.cu_seqlens_q, cu_seqlens_k=varlen.cu_seqlens_k, max_seqlen_q=varlen.max_q,
            max_seqlen_k=varlen.max_k, **call_kwargs(causal, scale, mods, sink)))


def call_kwargs(causal: bool, scale: float, mods, sink=None) -> dict:
    """The keywords both FA4 entry points take (by name: their positional order changed across versions); the sink
    (fp32 [H]) as `learnable_sink`, only when given."""
    kwargs = dict(softmax_scale=scale, causal=bool(causal), window_size=window_arg(mods), softcap=float(mods.softcap))
    if sink is not None:
        kwargs["learnable_sink"] = sink
    return kwargs
