"""What the bound launches (kernels/launch.py) save per eager call, measured on the CPU without a GPU (issue 44).

For each design at issue 44's shapes (bf16, causal), the forward's and the backward's launches are recorded (nothing
runs: JITFunction.run replaced by a recorder, the interpreter off, the sm90 default blocks). Per call, it then times:
  launchers  the designs' launcher code itself (argument groups, descriptors, allocations) with Triton's run a no-op
  triton     for every recorded launch, what JITFunction.run does before the launcher on a cache hit: the binder
             (binding and specializing every argument) and the cache-key lookup, for an sm90 target
  bound      for every recorded launch, what a bound launch does instead: `bound_arguments`
Neither the driver calls (current device, stream) nor the launcher's C code are included: both paths make them.

    python scripts/launch_cost_cpu.py [reps]              # Triton 3.9 here
    /work/venv36/bin/python scripts/launch_cost_cpu.py    # Triton 3.6, the GPU machines' version
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = [  # (label, batch, seq, heads, head_dim)
    ("B1 N256 H2 D64", 1, 256, 2, 64),
    ("B1 N1024 H4 D128", 1, 1024, 4, 128),
]
DESIGNS = ("two_pass", "ws", "ws_two_pass")


def recorded(variant_name, batch, seq, heads, head_dim):
    """(forward + backward launches [(fn, args, kwargs)], a function that runs the launcher code once)."""
    import torch
    from triton.runtime.jit import JITFunction

    from runners.compile.resources import probe_problem
    from variants import get
    from variants.base import default_scale
    from variants.block_defaults import default_block_rule

    variant = get(variant_name)
    probe = probe_problem(head_dim, "bf16", True, heads, heads)
    rule = default_block_rule(variant_name, probe, arch="sm90")
    blocks = variant.Blocks(**(rule["blocks"] if rule else {}))
    # meta tensors: allocations and fills cost what they cost on a GPU's host side (no CPU memory work)
    q, k, v, o, do = (torch.empty(batch, seq, heads, head_dim, dtype=torch.bfloat16, device="cpu") for _ in range(5))
    lse = torch.empty(batch, heads, seq, dtype=torch.float32, device="cpu")
    scale = default_scale(head_dim)

    def call():
        variant.forward(q, k, v, True, scale)
        variant.backward(q, k, v, o, lse, do, causal=True, scale=scale, blocks=blocks)

    launches, original = [], JITFunction.run
    JITFunction.run = lambda self, *args, grid, warmup, **kwargs: launches.append((self, args, kwargs))
    try:
        call()
    finally:
        JITFunction.run = original

    def launcher_code():
        JITFunction.run = lambda self, *args, grid, warmup, **kwargs: None
        try:
            call()
        finally:
            JITFunction.run = original
    return launches, launcher_code


def per_call_us(fn, reps: int) -> float:
    for _ in range(max(3, reps // 10)):
        fn()
    best = float("inf")
    for _ in range(5):
        tic = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - tic) / reps * 1e6)
    return best


def main(reps: int) -> None:
    from runners.compile.resources import use_compiler_not_interpreter
    use_compiler_not_interpreter()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import compute_cache_key, create_function_from_signature

    from kernels.launch import bound_arguments, parameters

    backend = make_backend(GPUTarget("cuda", 90, 32))
    print(f"Triton {triton.__version__}, us per forward + backward call (best of 5 x {reps}):")
    print(f"{'design':12s} {'shape':18s} {'launches':>8s} {'launchers':>10s} {'triton':>8s} {'bound':>7s}")
    for shape in SHAPES:
        label, *dims = shape
        for name in DESIGNS:
            launches, launcher_code = recorded(name, *dims)
            prepared = []
            for fn, args, kwargs in launches:
                binder = create_function_from_signature(fn.signature, fn.params, backend)
                kwargs = {**kwargs, "debug": False}  # as JITFunction.run adds
                prepared.append((fn, binder, args, kwargs, parameters(fn), {}))

            def triton_path():
                for fn, binder, args, kwargs, _, key_cache in prepared:
                    _, specialization, options = binder(*args, **kwargs)
                    compute_cache_key(key_cache, specialization, options)

            def bound_path():
                for _, _, args, kwargs, params, _ in prepared:
                    bound_arguments(params, args, kwargs)
            print(f"{name:12s} {label:18s} {len(launches):8d} {per_call_us(launcher_code, reps):10.1f} "
                  f"{per_call_us(triton_path, reps):8.1f} {per_call_us(bound_path, reps):7.1f}")
            for fn, binder, args, kwargs, _, key_cache in prepared:  # per kernel, the Triton path's cost
                def one():
                    _, specialization, options = binder(*args, **kwargs)
                    compute_cache_key(key_cache, specialization, options)
                print(f"    {fn.__name__:24s} triton {per_call_us(one, reps):7.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
