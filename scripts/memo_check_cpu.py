"""Checks on the CPU that a warm eager call's launches, built from the phases' memos (kernels.launch.memo), hand each
kernel what the full launcher path hands it (issue 44: host time per call).

It runs the designs' real launchers on CPU tensors as on an sm90 GPU (scripts/launch_count_cpu.py's harness: plans
that bind, stand-in compiled kernels) and writes each launch's argument values, in the kernel's order, in a canonical
form: a tensor as (shape, strides, dtype, its label), a TMA descriptor as its fields but the base plus its base's
label, everything else as it is. Labels name the call's leaves (q, k, v, do) and number every other storage by first
appearance in the call, so aliasing (a placeholder, an accumulator passed for unused pointers) is compared too. The
first call of a signature (the full path, recording) and later calls (from the memos, bound) must give the same
forms, for several signatures (a new shape, a new dO layout, GQA) and scales (the scale is never memoized).

    python scripts/memo_check_cpu.py [designs]       # exit 0: every warm launch matched; prints one JSON line
    python scripts/memo_check_cpu.py ws --gluon-forward   # the Gluon forward (its sm90 default), not the stock one

On the CPU the Gluon forward refuses the call (`forward_reason`: a CPU tensor), so the designs' forward is the stock
one; --gluon-forward makes that check pass, so the Gluon forward's launcher and its memo run as on an sm90 GPU.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["TRITON_INTERPRET"] = "0"

DESIGNS = ("two_pass", "ws", "ws_two_pass", "atomic_tma", "atomic", "fused")
SIGNATURES = (  # (B, N, H, Hkv, D, dO transposed)
    (1, 256, 2, 2, 64, False),
    (1, 1024, 4, 4, 128, False),
    (2, 200, 4, 2, 64, False),
    (1, 256, 2, 2, 64, True),
)


def canonical(values: list, leaves: dict) -> list:
    import torch
    labels = dict(leaves)

    def label(t):
        ptr = t.data_ptr()
        if ptr not in labels:
            labels[ptr] = f"t{len(labels)}"
        return labels[ptr]

    def form(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", tuple(value.shape), value.stride(), str(value.dtype), label(value))
        if type(value).__name__ == "TensorDescriptor":
            fields = {name: repr(field) for name, field in value.__dict__.items() if name != "base"}
            return ("desc", sorted(fields.items()), label(value.base))
        if isinstance(value, tuple):
            return tuple(form(item) for item in value)
        return repr(value)
    return [form(value) for value in values]


def main(designs, gluon_forward: bool = False) -> int:
    import torch

    import kernels.launch as launch_module
    from launch_count_cpu import Harness
    from variants import attention
    from variants.plan import plans

    harness = Harness()
    captured = []
    record_call = launch_module.BoundLaunch.__call__
    original_bind = launch_module.bind

    def capture_bound(bound, fn, grid, args, kwargs):  # the warm path's values: what the launcher is handed
        run = bound.run

        def spy(*launcher_args):
            captured.append((fn.__name__, tuple(grid), list(launcher_args[9:])))
        bound.run = spy
        try:
            return record_call(bound, fn, grid, args, kwargs)
        finally:
            bound.run = run

    def capture_first(fn, kernel, args, kwargs):  # the recording run's values, as Triton's binder would bind them
        values = launch_module.bound_arguments(launch_module.parameters(fn), args, kwargs)
        captured.append((fn.__name__, None, values))
        return original_bind(fn, kernel, args, kwargs)

    launch_module.BoundLaunch.__call__ = capture_bound
    launch_module.bind = capture_first
    import kernels.gluon.forward as gluon_forward_module
    forward_reason = gluon_forward_module.forward_reason
    if gluon_forward:
        gluon_forward_module.forward_reason = lambda *args, **kwargs: None
    failures, checked = [], 0
    try:
        for design in designs:
            for batch, seq, heads, kv_heads, head_dim, transposed in SIGNATURES:
                gen = torch.Generator().manual_seed(0)
                q = torch.randn(batch, seq, heads, head_dim, generator=gen).bfloat16().requires_grad_()
                k, v = (torch.randn(batch, seq, kv_heads, head_dim, generator=gen).bfloat16().requires_grad_()
                        for _ in range(2))
                do = torch.randn(batch, seq, heads, head_dim, generator=gen).bfloat16()
                if transposed:
                    do = do.transpose(1, 2).contiguous().transpose(1, 2)
                leaves = {t.data_ptr(): name for name, t in (("q", q), ("k", k), ("v", v), ("do", do))}
                forms = {}
                builds = plans.builds
                for scale in (0.125, 0.125, 0.3, 0.125):
                    captured.clear()
                    o = attention(q, k, v, causal=True, variant=design, scale=scale)
                    torch.autograd.grad(o, (q, k, v), do)
                    got = [(name, canonical(values, leaves)) for name, _, values in captured]
                    if scale in forms:
                        checked += len(got)
                        if got != forms[scale]:
                            failures.append(f"{design} {(batch, seq, heads, kv_heads, head_dim, transposed)} "
                                            f"scale {scale}: warm launches differ from the first call's")
                    else:
                        forms[scale] = got
                if plans.builds - builds != (0 if transposed else 1):  # a new dO layout: the same plan, new sites
                    failures.append(f"{design}: {plans.builds - builds} plans built for one signature")
                if gluon_forward and not any(name.startswith(("_gluon_fwd", "gluon_fwd")) for name, _ in forms[0.125]):
                    failures.append(f"{design}: --gluon-forward, but no Gluon forward launch")
                if forms[0.125] == forms[0.3]:
                    failures.append(f"{design}: the scale did not reach the launches")
                plan = next(reversed(plans._plans.values()))
                if not all(sites.memos for sites in plan.launches.values()):
                    failures.append(f"{design}: a phase kept no memo")
    finally:
        launch_module.BoundLaunch.__call__ = record_call
        launch_module.bind = original_bind
        gluon_forward_module.forward_reason = forward_reason
        harness.uninstall()
    print(json.dumps(dict(checked=checked, failures=failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    ARGS = [arg for arg in sys.argv[1:] if arg != "--gluon-forward"]
    sys.exit(main(ARGS[0].split(",") if ARGS else DESIGNS, gluon_forward="--gluon-forward" in sys.argv[1:]))
