"""FlashAttention-4's package as the harness calls it (the `flash-attn-4` wheel, imported as `flash_attn.cute`):
whether it is installed, its module, the dtypes, architectures and head dims it takes, and the keywords of its entry
points. Shared by the `fa4` baseline (variants/fa4.py) and the `fa4` forward choice (kernels/forward_baselines.py);
it imports nothing of the harness, so kernels/ does not reach into variants/ for it. flash_attn.cute itself is
imported only by `cute()`.
"""
import importlib
import importlib.util
import sys
from pathlib import Path

import torch

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


def arch_reason(major: int, head_dim: int, head_dim_v: int | None = None) -> str | None:
    """Why FA4 cannot run on a GPU of compute capability major.x with these head dims (None: it can)."""
    if major not in ARCHS:
        return f"FlashAttention-4 runs on sm90 and sm100 here, not on compute capability {major}.x"
    return head_dim_reason(head_dim, major, head_dim_v)


def window_arg(mods) -> tuple:
    """FA4's window_size of the harness's (left, right): None where the harness writes -1 (unbounded). FA4 drops a
    pair whose sum is negative, so (-1, 0) passed as it is would be no window at all rather than causal."""
    return window_sizes(mods.window_left, mods.window_right)


def window_sizes(left: int, right: int) -> tuple:
    """window_arg of a (left, right) pair as variants.problem.window_pair writes it (-1 = unbounded)."""
    return tuple(None if w < 0 else w for w in (left, right))


def output(result) -> torch.Tensor:
    """o of what FA4 returns: `out`, or `(out, lse)` in the versions that always return the LSE."""
    return result[0] if isinstance(result, (tuple, list)) else result


def layout(t: torch.Tensor) -> torch.Tensor:
    """t as FA4's kernels read it: [..., N, H, D] with the head dim contiguous (a [B, H, N, D] input's transposed
    view already is one; only a strided head dim is copied)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def call_kwargs(causal: bool, scale: float, mods=None, sink=None) -> dict:
    """The keywords both FA4 entry points take (by name: their positional order changed across versions); mods: the
    score modifiers (window, softcap; None: neither); the sink (fp32 [H]) as `learnable_sink`, only when given."""
    window, softcap = ((None, None), 0.0) if mods is None else (window_arg(mods), float(mods.softcap))
    kwargs = dict(softmax_scale=scale, causal=bool(causal), window_size=window, softcap=softcap)
    if sink is not None:
        kwargs["learnable_sink"] = sink
    return kwargs
