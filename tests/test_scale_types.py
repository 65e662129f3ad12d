"""An fp64 scale reaches the kernels and they still compile: every Triton design's forward and backward kernels,
compiled for sm90 on the CPU with each `*scale` parameter or argument-group field (`sizes.qk_scale`) typed fp64 (what Inductor gave a user-defined Triton
kernel for a Python float: issue 27, `Loop-carried variable b_m has initial type fp32 but is re-assigned to fp64`).

Runs in a subprocess: it needs @triton.jit without the interpreter (tests/test_compile_check.py says why).
"""
import os
import subprocess
import sys

import pytest

from runners.point import env
from variants import get
from variants.registry import registered
from variants.base import TritonVariant

from tests.test_compile_check import needs_ptxas

SCRIPT = r'''
import sys
from runners.compile.resources import capture_launches, compile_kernel
from triton.runtime.jit import JITFunction

variant_name = sys.argv[1]
blocks, _, launches = capture_launches(variant_name, 64, "fp16", True, 2, 1, {})
from variants import get
from variants.base import default_scale
import torch
q = torch.randn(1, 128, 2, 64, dtype=torch.float16)  # [B, N, H, D]
kv = torch.randn(1, 128, 1, 64, dtype=torch.float16)  # [B, N, Hkv, D]
original = JITFunction.run
JITFunction.run = lambda self, *args, grid, warmup, **kwargs: launches.append((self, args, kwargs))
try:
    get(variant_name).forward(q, kv, kv, True, default_scale(64))
except Exception:
    pass  # the forward allocates and launches once; nothing after the launch matters here
finally:
    JITFunction.run = original
compiled = []
for fn, args, kwargs in launches:
    scales = {name: "fp64" for name in fn.arg_names if name.endswith("scale")}
    scales.update({f"{name}.{field}": "fp64" for name, value in kwargs.items()  # grouped: sizes.qk_scale, ...
                   for field in getattr(value, "_fields", ()) if field.endswith("scale")})
    if scales:
        compile_kernel(fn, args, kwargs, scalar_types=scales)
        compiled.append(fn.__name__)
print("compiled with fp64 scales:", " ".join(compiled))
'''

TRITON_DESIGNS = [name for name in registered() if isinstance(get(name), TritonVariant)]


@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("variant", TRITON_DESIGNS)
def test_fp64_scale_compiles(variant):
    run = subprocess.run([sys.executable, "-c", SCRIPT, variant], cwd=env.REPO, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1",
                                           "PYTHONPATH": str(env.REPO)})
    assert run.returncode == 0, run.stderr[-3000:]
    compiled = run.stdout.split(":", 1)[1].split()
    assert "_fwd_kernel" in compiled, run.stdout
    assert set(compiled) - {"_fwd_kernel", "_dq_finish_kernel"}, f"no backward kernel took an fp64 scale: {run.stdout}"
