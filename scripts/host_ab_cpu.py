"""Before / after host cost of warm eager calls on the CPU, both checkouts in one process, their rounds interleaved
(issue 44). Each checkout's packages (kernels, variants) are imported under their own module objects and swapped into
sys.modules before each of its blocks (the launchers' lazy imports then resolve to that checkout). Each checkout runs
its real launchers on CPU tensors as on an sm90 GPU with stand-in kernels whose launcher does nothing
(scripts/launch_count_cpu.py's Harness, installed once per checkout): plans bind, warm calls take the bound path, as
on a GPU. Triton's C launcher, the TMA descriptor fills and the driver are not in either side.

    git archive <before commit> | tar -x -C /tmp/before
    python scripts/host_ab_cpu.py /tmp/before [calls] [rounds] [designs] [B,N,H,D]

Prints us per warm forward + backward call (bf16 causal) per design: the best block and the median block of each
side, and after / before of each.
"""
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["TRITON_INTERPRET"] = "0"
PACKAGES = ("kernels", "variants", "launch_count_cpu")


def _ours() -> dict:
    return {name: module for name, module in sys.modules.items() if name.split(".")[0] in PACKAGES}


def activate(modules: dict) -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in PACKAGES:
            del sys.modules[name]
    sys.modules.update(modules)


def load(root: str) -> dict:
    """root's packages imported afresh, with the stand-ins installed on them; their modules."""
    activate({})
    sys.path.insert(0, root)
    sys.path.insert(0, os.path.join(HERE, "scripts"))  # one Harness for both sides
    try:
        import variants  # noqa: F401
        from launch_count_cpu import Harness
        Harness()
    finally:
        sys.path.remove(root)
        sys.path.remove(os.path.join(HERE, "scripts"))
    return _ours()


def main(before_root: str, calls: int, rounds: int, designs: list, shape: tuple) -> None:
    import torch
    sides = {"before": load(before_root), "after": load(HERE)}
    files = {side: modules["kernels.launch"].__file__ for side, modules in sides.items()}
    assert files["before"] != files["after"] and files["after"].startswith(HERE), files  # two checkouts, really
    gen = torch.Generator().manual_seed(0)
    batch, seq, heads, head_dim = shape
    q, k, v, do = (torch.randn(batch, seq, heads, head_dim, generator=gen).bfloat16() for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_()
    callers = {}
    for side, modules in sides.items():
        activate(modules)
        attention = modules["variants"].attention
        for design in designs:
            def call(attention=attention, design=design):
                o = attention(q, k, v, causal=True, variant=design)
                torch.autograd.grad(o, (q, k, v), do)
            for _ in range(5):  # records, binds, then warm; the lazy imports land in this side's modules
                call()
            callers[side, design] = call
        sides[side] = _ours()
    blocks = {key: [] for key in callers}
    for index in range(rounds):
        order = list(callers) if index % 2 == 0 else list(reversed(list(callers)))
        for side, design in order:
            activate(sides[side])
            call = callers[side, design]
            call()
            tic = time.perf_counter()
            for _ in range(calls):
                call()
            blocks[side, design].append((time.perf_counter() - tic) / calls * 1e6)
    print(f"us per warm eager forward + backward, B{batch} N{seq} H{heads} D{head_dim} bf16 causal, CPU stand-in "
          f"kernels ({rounds} interleaved rounds of {calls} calls per side and design)")
    print(f"{'design':12s} {'before best':>11s} {'after best':>10s} {'ratio':>6s} {'before med':>10s} "
          f"{'after med':>9s} {'ratio':>6s}")
    for design in designs:
        b, a = blocks["before", design], blocks["after", design]
        print(f"{design:12s} {min(b):11.1f} {min(a):10.1f} {min(a) / min(b):6.2f} {statistics.median(b):10.1f} "
              f"{statistics.median(a):9.1f} {statistics.median(a) / statistics.median(b):6.2f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], int(args[1]) if len(args) > 1 else 200, int(args[2]) if len(args) > 2 else 10,
         args[3].split(",") if len(args) > 3 else ["ws", "ws_two_pass", "two_pass"],
         tuple(int(x) for x in args[4].split(",")) if len(args) > 4 else (1, 1024, 4, 128))
