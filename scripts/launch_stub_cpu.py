"""The host cost of an eager attention() forward + backward on the CPU with the real launchers and stand-in kernels
(issue 44): every launcher runs as on a GPU (argument groups, TMA descriptors, allocations on CPU tensors), and each
kernel launch either goes through a stand-in for Triton's path (`JITFunction.run` doing what it does before the
launcher on a cache hit: the binder for an sm90 target, which binds and specializes every argument, and the cache-key
lookup; then a no-op launcher) or, on this checkout, through the bound launches (kernels/launch.py) with the same
no-op launcher. The design's checks are skipped (a CPU tensor is refused otherwise) and the plans are built as on a
GPU. Driver calls (current device and stream) and the launcher's C code are not in either: both paths make them.

    python scripts/launch_stub_cpu.py [calls]                           # this checkout: triton path and bound
    PYTHONPATH=/other/checkout python scripts/launch_stub_cpu.py        # a checkout without kernels/launch.py

Prints mean us per call (best of 7 rounds, the modes interleaved) per design at B1 N256 H2 D64 bf16 causal.
"""
import os
import sys
import time

if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["TRITON_INTERPRET"] = "0"

DESIGNS = ("two_pass", "ws", "ws_two_pass")


class _Compiled:
    function = packed_metadata = None

    def launch_metadata(self, grid, stream, *args):
        return None

    @property
    def run(self):
        return self._launcher

    def _launcher(self, *args):
        return None


def main(calls: int, rounds: int = 7) -> None:
    from triton import knobs
    knobs.runtime.interpret = False
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature

    import variants.plan as plan_module
    from variants import attention
    from variants.base import Variant

    backend = make_backend(GPUTarget("cuda", 90, 32))
    binders, compiled = {}, {}

    def triton_path(self, *args, grid, warmup, **kwargs):  # JITFunction.run up to its launcher, on a cache hit
        kwargs["debug"] = kwargs.get("debug", self.debug) or knobs.runtime.debug
        if self not in binders:
            binders[self] = (create_function_from_signature(self.signature, self.params, backend), {})
            compiled[self] = _Compiled()
        binder, key_cache = binders[self]
        bound_args, specialization, options = binder(*args, **kwargs)
        compute_cache_key(key_cache, specialization, options)
        kernel = compiled[self]
        kernel.run(grid[0], 1, 1, None, None, None, None, None, None, *bound_args.values())
        return kernel

    JITFunction.run = triton_path
    Variant.check = lambda self, problem: None  # CPU tensors: the designs would refuse them
    try:
        import kernels.launch as launch_module
        launch_module.driver_api = lambda: (lambda: 0, lambda device: 0, knobs)
        has_launch = True
    except ImportError:
        has_launch = False
    build = plan_module.build
    modes = {"triton path": "off"} if not has_launch else {"triton path": "off", "bound launches": "on"}
    print(f"Triton {triton.__version__}, {'this checkout' if has_launch else 'a checkout without bound launches'}; "
          f"us per forward + backward call, B1 N256 H2 D64 bf16 causal (best of {rounds} rounds of {calls}, modes interleaved):")
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 256, 2, 64, generator=gen).bfloat16().requires_grad_()
    k, v = (torch.randn(1, 256, 2, 64, generator=gen).bfloat16().requires_grad_() for _ in range(2))
    do = torch.randn(1, 256, 2, 64, generator=gen).bfloat16()
    best = {}
    for _ in range(rounds):  # modes interleaved round by round: a shared machine's load hits both alike
        for name in DESIGNS:
            for label, mode in modes.items():
                if has_launch:
                    import dataclasses
                    reason = None if mode == "on" else "measured without bound launches"
                    plan_module.build = lambda *a, _r=reason: dataclasses.replace(build(*a), unbound_reason=_r)
                plan_module.plans.clear()

                def call():
                    o = attention(q, k, v, causal=True, variant=name)
                    torch.autograd.grad(o, (q, k, v), do)
                for _ in range(5):
                    call()
                tic = time.perf_counter()
                for _ in range(calls):
                    call()
                us = (time.perf_counter() - tic) / calls * 1e6
                best[name, label] = min(best.get((name, label), us), us)
    for name in DESIGNS:
        print("  " + name.ljust(12) + "".join(f" {label}: {best[name, label]:7.1f}" for label in modes))

if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
