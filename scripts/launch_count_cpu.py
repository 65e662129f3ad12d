"""What one warm eager attention() forward + backward does on the host, per design, counted on the CPU (issue 44).

Every design runs its real launchers on CPU tensors as on an sm90 GPU (its sm90 default blocks, plans that bind);
each kernel launch goes to a stand-in compiled kernel whose launcher does nothing, so the first call records the
launches and later calls take the bound path, as on a GPU. Nothing is timed against Triton: it counts, per warm
call (the second and later calls of one signature):

  launches   kernel launches (by kernel name)
  torch ops  top-level aten ops (torch.profiler): allocations (empty / zeros / empty_like ...), fills (zero_,
             fill_), views, copies; autograd's own ops included
  py calls   Python function calls (cProfile's count), a measure of the launchers' and the plan path's own work

and, for information only, the host us per call (best of 5 rounds). tests/test_launch_count.py pins the counts.

    python scripts/launch_count_cpu.py                  # every Triton design at issue 44's shapes
    python scripts/launch_count_cpu.py ws 1,1024,16,128 # one design, B,N,H,D
    python scripts/launch_count_cpu.py --profile ws     # and the top of a cProfile by own time
    python scripts/launch_count_cpu.py --json           # the counts as one JSON object, no timing (the test)
"""
import collections
import cProfile
import json
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["TRITON_INTERPRET"] = "0"

DESIGNS = ("two_pass", "ws_two_pass", "ws", "fused", "atomic", "atomic_tma")
SHAPES = ((1, 256, 2, 64), (1, 1024, 4, 128))  # (B, N, H, D): issue 44's done-when shapes, bf16 causal


class _Compiled:
    """A compiled kernel's launcher API, doing nothing."""
    function = packed_metadata = None

    def __init__(self, name: str):
        self.name = name

    def launch_metadata(self, grid, stream, *args):
        return None

    def run(self, *args):
        return None


class Harness:
    """The stand-ins installed (JITFunction.run, the driver API, the checks, the sm90 block table, bindable plans);
    `uninstall()` puts everything back."""

    def __init__(self):
        from triton import knobs
        from triton.runtime.jit import JITFunction

        import kernels.launch as launch_module
        import variants.block_defaults as block_defaults
        import variants.plan as plan_module
        from variants.base import Variant
        knobs.runtime.interpret = False
        self.launched = []
        compiled = {}

        def stand_in(fn, *args, grid, warmup, **kwargs):  # Triton's path: record and hand back a compiled kernel
            self.launched.append(fn.__name__)
            return compiled.setdefault(fn, _Compiled(fn.__name__))

        build = plan_module.build

        def bindable(*args):
            import dataclasses
            return dataclasses.replace(build(*args), unbound_reason=None)

        bound_call = launch_module.BoundLaunch.__call__

        def counted(bound, fn, grid, args, kwargs):
            self.launched.append(fn.__name__)
            return bound_call(bound, fn, grid, args, kwargs)

        self.saved = [(JITFunction, "run", JITFunction.run), (Variant, "check", Variant.check),
                      (launch_module, "driver_api", launch_module.driver_api),
                      (launch_module, "ENABLED", launch_module.ENABLED),
                      (launch_module.BoundLaunch, "__call__", bound_call),
                      (block_defaults, "architecture", block_defaults.architecture),
                      (plan_module, "build", build)]
        JITFunction.run = stand_in
        Variant.check = lambda self, problem: None  # CPU tensors: the designs would refuse them
        launch_module.driver_api = lambda: (lambda: 0, lambda device: 0, knobs)
        launch_module.ENABLED = True
        launch_module.BoundLaunch.__call__ = counted
        block_defaults.architecture = lambda problem: "9.0"
        plan_module.build = bindable
        plan_module.plans.clear()

    def uninstall(self) -> None:
        import variants.plan as plan_module
        for owner, name, value in self.saved:
            setattr(owner, name, value)
        plan_module.plans.clear()


def inputs(batch, seq, heads, head_dim):
    import torch
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(batch, seq, heads, head_dim, generator=gen).bfloat16() for _ in range(4))
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), do


def caller(design: str, shape: tuple):
    import torch

    from variants import attention
    q, k, v, do = inputs(*shape)

    def call():
        o = attention(q, k, v, causal=True, variant=design)
        torch.autograd.grad(o, (q, k, v), do)
    return call


def top_level_ops(call) -> collections.Counter:
    """The top-level aten ops of one call, by name."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    ops = collections.Counter()
    for event in prof.events():
        if event.name.startswith("aten::") and (event.cpu_parent is None or
                                                not event.cpu_parent.name.startswith("aten::")):
            ops[event.name] += 1
    return ops


def python_calls(call) -> int:
    profiler = cProfile.Profile()
    profiler.enable()
    call()
    profiler.disable()
    return sum(nc for (_, nc, _, _, _) in pstats.Stats(profiler).stats.values())


def count(harness: Harness, design: str, shape: tuple) -> dict:
    """The counts of one warm call (after two warm-ups: the first records, the second is the first bound one)."""
    from kernels.launch import stats
    from variants.plan import plans
    call = caller(design, shape)
    call()
    call()
    builds, jit = plans.builds, stats.jit
    harness.launched.clear()
    call()
    launches = list(harness.launched)
    ops = top_level_ops(call)
    return dict(launches=launches, ops=ops, py_calls=python_calls(call), plan_builds=plans.builds - builds,
                jit_launches=stats.jit - jit)


ALLOCATING = ("aten::empty", "aten::empty_like", "aten::zeros", "aten::zeros_like", "aten::empty_strided",
              "aten::new_empty", "aten::new_zeros", "aten::ones_like")
FILLS = ("aten::zero_", "aten::fill_")


def summary(counts: dict) -> dict:
    ops = counts["ops"]
    return dict(launches=len(counts["launches"]), torch_ops=sum(ops.values()),
                allocations=sum(ops[name] for name in ALLOCATING), fills=sum(ops[name] for name in FILLS),
                py_calls=counts["py_calls"])


def per_call_us(call, reps: int = 100) -> float:
    best = float("inf")
    for _ in range(5):
        tic = time.perf_counter()
        for _ in range(reps):
            call()
        best = min(best, (time.perf_counter() - tic) / reps * 1e6)
    return best


def main(argv: list) -> None:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return
    unknown = [a for a in argv if a.startswith("-") and a not in ("--profile", "--json")]
    if unknown:
        raise SystemExit(f"launch_count_cpu.py: unknown option {unknown[0]!r} (--profile, --json; --help)")
    profile, as_json = "--profile" in argv, "--json" in argv
    argv = [a for a in argv if a not in ("--profile", "--json")]
    designs = argv[0].split(",") if argv else DESIGNS
    shapes = [tuple(int(x) for x in argv[1].split(","))] if len(argv) > 1 else SHAPES
    harness = Harness()
    try:
        if as_json:
            out = {}
            for shape in shapes:
                for design in designs:
                    counts = count(harness, design, shape)
                    out[f"{design} {','.join(map(str, shape))}"] = dict(
                        summary(counts), launched=counts["launches"], ops=dict(counts["ops"]),
                        plan_builds=counts["plan_builds"], jit_launches=counts["jit_launches"])
            print(json.dumps(out))
            return
        print(f"{'design':12s} {'B,N,H,D':14s} {'launches':>8s} {'ops':>4s} {'allocs':>6s} {'fills':>5s} "
              f"{'py calls':>8s} {'us/call':>8s}  launches; torch ops")
        for shape in shapes:
            for design in designs:
                counts = count(harness, design, shape)
                row = summary(counts)
                us = per_call_us(caller(design, shape))
                label = ",".join(map(str, shape))
                print(f"{design:12s} {label:14s} {row['launches']:8d} {row['torch_ops']:4d} {row['allocations']:6d} "
                      f"{row['fills']:5d} {row['py_calls']:8d} {us:8.1f}  {' '.join(counts['launches'])}; "
                      + " ".join(f"{name[6:]}x{n}" for name, n in sorted(counts["ops"].items())))
                if profile:
                    profiler = cProfile.Profile()
                    call = caller(design, shape)
                    call()
                    profiler.enable()
                    for _ in range(200):
                        call()
                    profiler.disable()
                    rows = sorted(((tt, nc, f"{os.path.basename(fn)}:{line}:{func}") for (fn, line, func),
                                   (_, nc, tt, _, _) in pstats.Stats(profiler).stats.items()), reverse=True)
                    for tt, nc, name in rows[:25]:
                        print(f"    {name:60s} calls/call {nc / 200:6.1f} own {tt / 200 * 1e6:7.1f} us/call")
    finally:
        harness.uninstall()


if __name__ == "__main__":
    main(sys.argv[1:])
