"""Checks, without a GPU, that a bound launch (kernels/launch.py) hands the compiled kernel's launcher the arguments
Triton's own path would: for every launch of each design's forward and backward (recorded, never run, as
runners.compile_check records them), `bound_arguments` must give the very objects, in the very order, of Triton's
binder (`bound_args.values()`, what JITFunction.run passes to `kernel.run`) for an sm90 target; then one kernel
(the delta preprocess) is compiled for sm90 and its launcher's signature must have one entry per bound argument.

    python scripts/bound_args_check.py [--variants two_pass,ws,...]    # exit 0: every launch matched
    /work/venv36/bin/python scripts/bound_args_check.py                 # the same under Triton 3.6

Run it in a fresh process: it needs @triton.jit without the interpreter.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VARIANTS = ("two_pass", "atomic", "fused", "atomic_tma", "ws", "ws_two_pass")
CASES = [  # (head_dim, dtype, causal, heads, kv_heads, modifiers)
    (64, "bf16", True, 2, 2, None),
    (128, "fp16", False, 4, 2, None),
    (96, "bf16", True, 2, 1, None),
    (64, "bf16", True, 2, 2, {"window": 100}),
]


def launches_of(variant_name, case):
    """[(JITFunction, args, kwargs)] of the forward and the backward of one case (nothing run), or None when the
    design refuses the case."""
    import torch
    from triton.runtime.jit import JITFunction

    from runners.compile.resources import CompileCheckError, capture_launches, probe_problem
    from variants import get
    from variants.base import default_scale

    head_dim, dtype, causal, heads, kv_heads, modifiers = case
    variant = get(variant_name)
    probe = probe_problem(head_dim, dtype, causal, heads, kv_heads, modifiers)
    if variant.problem_reason(probe):
        return None
    try:
        _, _, backward = capture_launches(variant_name, head_dim, dtype, causal, heads, kv_heads, {},
                                          modifiers=modifiers)
    except CompileCheckError:
        return None
    forward, original = [], JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        forward.append((self, args, kwargs))

    from variants.problem import DTYPES
    q = torch.randn(1, 256, heads, head_dim, dtype=DTYPES[dtype])
    k, v = (torch.randn(1, 256, kv_heads, head_dim, dtype=DTYPES[dtype]) for _ in range(2))
    JITFunction.run = record
    try:
        variant.forward(q, k, v, causal, default_scale(head_dim), mods=probe.mods)
    finally:
        JITFunction.run = original
    return forward + backward


def check_launch(fn, args, kwargs, binder_of) -> str | None:
    """None when bound_arguments gives the binder's bound values (same objects, same order), else what differs."""
    from kernels.launch import bound_arguments, parameters
    bound_args, _, _ = binder_of(fn)(*args, **kwargs)
    theirs = list(bound_args.values())
    ours = bound_arguments(parameters(fn), args, kwargs)
    if len(ours) != len(theirs):
        return f"{len(ours)} arguments, the binder {len(theirs)}"
    for name, a, b in zip(bound_args, ours, theirs):
        if a is not b and not (type(a) is type(b) and a == b and not hasattr(a, "data_ptr")):
            return f"{name}: {type(a).__name__} where the binder has {type(b).__name__}"
    return None


def compile_one() -> str:
    """Compiles the delta kernel for sm90; its launcher must take one argument per bound value."""
    import torch

    from kernels.launch import bound_arguments, parameters
    from kernels.preprocess import _delta_kernel
    from runners.compile.resources import compile_kernel
    from triton.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

    o, do = (torch.randn(1, 64, 2, 64, dtype=torch.bfloat16) for _ in range(2))
    recorded, original = [], JITFunction.run
    JITFunction.run = lambda self, *args, grid, warmup, **kwargs: recorded.append((self, args, kwargs))
    try:
        from kernels.preprocess import attention_delta
        attention_delta(o, do)
    finally:
        JITFunction.run = original
    fn, args, kwargs = recorded[0]
    assert fn is _delta_kernel
    compiled = compile_kernel(fn, args, kwargs)
    for name in ("function", "packed_metadata", "launch_metadata"):
        assert hasattr(compiled, name), name
    assert isinstance(CompiledKernel.__dict__["run"], property), "CompiledKernel.run is not the launcher property"
    values = bound_arguments(parameters(fn), args, kwargs)
    if len(values) != len(compiled.src.signature):
        return f"{len(values)} bound values, the launcher's signature has {len(compiled.src.signature)}"
    return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args(argv)
    from runners.compile.resources import use_compiler_not_interpreter
    use_compiler_not_interpreter()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", 90, 32))
    binders = {}

    def binder_of(fn):
        if fn not in binders:
            binders[fn] = create_function_from_signature(fn.signature, fn.params, backend)
        return binders[fn]

    checked, failed = 0, []
    for name in args.variants.split(","):
        for case in CASES:
            launches = launches_of(name, case)
            for fn, fargs, fkwargs in launches or ():
                checked += 1
                problem = check_launch(fn, fargs, fkwargs, binder_of)
                if problem:
                    failed.append(f"{name} {case}: {fn.__name__}: {problem}")
    compiled = compile_one()
    if compiled:
        failed.append(f"_delta_kernel compiled for sm90: {compiled}")
    for line in failed:
        print("FAIL", line)
    print(f"Triton {triton.__version__}: {checked} launches checked, {len(failed)} failed; delta kernel compiled for "
          f"sm90: {'ok' if not compiled else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
