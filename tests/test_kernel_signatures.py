"""The stock Triton kernels take shapes and grouped strides, not long positional lists (issue 23).

- Every @triton.jit function under kernels/ (kernels/gluon aside) has at most MAX_PARAMS parameters, constexprs
  included: strides come as one (batch, token, head) set per tensor family, flags the kernel can derive (BLOCK_D,
  EVEN_D, the dots' input precision, IS_VARLEN) are derived inside it.
- Every kernel launch under kernels/ passes its arguments by keyword.
- No design's kernel module imports another's: what several designs launch lives in kernels/launch.py.
- The layout contract (kernels/launch.py) copies nothing in the supported layouts, and a tensor outside it is
  copied into it with the same gradients.
"""
import ast
import importlib
import pkgutil
from pathlib import Path

import pytest
import torch
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

import kernels
from kernels.launch import backward_layout, is_dense, same_strides
from tests.test_variants import (TRITON_VARIANTS, design, make_inputs, run_and_check, skip_unless_supported,
                                 small_blocks)

MAX_PARAMS = 30
KERNELS_DIR = Path(kernels.__file__).parent
LAUNCHED = {"_dkdv_kernel", "_dq_kernel", "_fused_kernel", "_atomic_tma_kernel", "_fwd_kernel", "_delta_kernel",
            "_dq_finish_kernel"}


def kernel_modules() -> list[str]:
    """kernels/*.py (the kernels/gluon package is not a stock Triton design)."""
    return sorted(info.name for info in pkgutil.iter_modules(kernels.__path__) if not info.ispkg)


def jit_functions() -> dict[str, object]:
    """name -> @triton.jit function (a JITFunction, or under TRITON_INTERPRET an InterpretedFunction) defined in
    kernels/*.py (re-exports counted once, where they are defined)."""
    found = {}
    for module_name in kernel_modules():
        module = importlib.import_module(f"kernels.{module_name}")
        for name, obj in vars(module).items():
            if isinstance(obj, (JITFunction, InterpretedFunction)) and obj.fn.__module__ == module.__name__:
                found[f"{module_name}.{name}"] = obj
    return found


def test_every_triton_function_takes_at_most_30_parameters():
    functions = jit_functions()
    assert LAUNCHED <= {name.split(".")[1] for name in functions}, "a launched kernel was not found"
    counts = {name: len(fn.arg_names) for name, fn in functions.items()}
    too_long = {name: n for name, n in counts.items() if n > MAX_PARAMS}
    assert not too_long, f"more than {MAX_PARAMS} parameters (group strides per tensor family, derive flags): {too_long}"


def test_kernels_are_launched_by_keyword():
    """kernel[grid](...) calls in kernels/*.py pass no positional argument."""
    positional = []
    for module_name in kernel_modules():
        path = KERNELS_DIR / f"{module_name}.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and node.args:
                positional.append(f"{path.name}:{node.lineno}")
    assert not positional, f"kernel launches with positional arguments: {positional}"


def test_no_design_imports_another_design():
    """A design's kernel module (kernels/<registered Triton design>.py) imports shared modules only."""
    designs = {name for name in TRITON_VARIANTS if (KERNELS_DIR / f"{name}.py").exists()}
    assert {"two_pass", "atomic", "fused", "atomic_tma"} <= designs
    sideways = []
    for name in designs:
        tree = ast.parse((KERNELS_DIR / f"{name}.py").read_text())
        for node in ast.walk(tree):
            modules = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            sideways += [f"kernels/{name}.py imports {m}" for m in modules
                         if m.startswith("kernels.") and m.split(".")[1] in designs - {name}]
    assert not sideways, sideways


@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_supported_layouts_are_not_copied(layout):
    q, k, v, do = make_inputs((2, 33, 17, 4, 2, 40), torch.float16, "cpu", layout=layout)
    assert all(a is b for a, b in zip(backward_layout(q, k, v, do), (q, k, v, do)))
    packed = [t[:1].reshape(1, -1, *t.shape[2:]) for t in (q, k, v, do)] if layout == "bnhd" else None
    if packed is not None:  # a varlen batch: [1, total, H, D]
        assert all(a is b for a, b in zip(backward_layout(*packed), packed))


def test_layout_helpers():
    t = torch.randn(2, 3, 4, 8)
    assert is_dense(t) and is_dense(t.transpose(1, 2)) and is_dense(torch.randn(1, 5, 1, 8))
    assert not is_dense(t[..., ::2]) and not is_dense(torch.randn(2, 3, 3, 4, 8)[:, :, 0])
    assert not is_dense(torch.randn(1, 1, 1, 8).expand(2, 3, 4, 8))
    assert same_strides(torch.randn(1, 3, 4, 8), torch.randn(5, 3, 4, 8)[:1])  # size-1 dims ignored
    assert not same_strides(t, t.transpose(1, 2).contiguous().transpose(1, 2))


@pytest.mark.parametrize("variant", [design(v) for v in TRITON_VARIANTS])
def test_layouts_outside_the_contract_are_copied_and_correct(variant, device):
    """q with a head-dim stride of 2, v laid out unlike k ([B, H, N, D] storage), an expanded dO (all strides 0)."""
    shape = (1, 33, 40, 4, 2, 16)
    skip_unless_supported(variant, shape, True, torch.float32, device)
    _, k, _, _ = make_inputs(shape, torch.float32, device)
    q = torch.randn(1, 33, 4, 32, device=device)[..., ::2]
    v = make_inputs(shape, torch.float32, device, layout="bhnd")[2]
    do = torch.randn(1, 1, 1, 16, device=device).expand(1, 33, 4, 16)
    assert not is_dense(q) and not same_strides(v, k) and not is_dense(do)
    qc, kc, vc, doc = backward_layout(q, k, v, do)
    assert kc is k and is_dense(qc) and same_strides(vc, kc) and same_strides(doc, qc)
    assert all(torch.equal(a, b) for a, b in zip((qc, vc, doc), (q, v, do)))
    run_and_check(variant, q, k, v, do, True, blocks=small_blocks(variant))
