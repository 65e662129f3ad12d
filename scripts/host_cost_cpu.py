"""The host cost of an eager attention() forward + backward on the CPU without the interpreter's kernel time (issue 44):
the Triton designs' forward and backward replaced by stubs that only allocate their results, so what is timed is
everything an eager call does on the host but the launches (checks, blocks, dispatch, autograd). Prints the mean us per
call (best of 5 rounds of N) and the top of a cProfile. Run it on two checkouts to compare them:

    PYTHONPATH=. python scripts/host_cost_cpu.py 2000
"""
import cProfile
import os
import pstats
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from variants import attention  # noqa: E402
from variants.base import TritonVariant  # noqa: E402

BLOCKS = {"default blocks": None, "block overrides": {"BLOCK_M1": 16, "BLOCK_N1": 16, "BLOCK_M2": 16, "BLOCK_N2": 16}}


def stub_forward(self, q, k, v, causal, scale, varlen=None, mods=None, g=None):
    return torch.empty_like(q), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


def stub_backward(self, q, k, v, o, lse, do, delta=None, *, causal, scale, blocks, varlen=None, mods=None, g=None):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def main(calls: int) -> None:
    TritonVariant.forward, TritonVariant.backward = stub_forward, stub_backward
    q = torch.randn(1, 16, 2, 16, requires_grad=True)  # [B, N, H, D]
    k, v = (torch.randn(1, 16, 1, 16, requires_grad=True) for _ in range(2))  # [B, N, Hkv, D]
    do = torch.randn(1, 16, 2, 16)

    def call(blocks):
        o = attention(q, k, v, causal=True, variant="two_pass", blocks=blocks)
        torch.autograd.grad(o, (q, k, v), do)

    for label, blocks in BLOCKS.items():
        for _ in range(50):
            call(blocks)
        rounds = []
        for _ in range(5):
            tic = time.perf_counter()
            for _ in range(calls):
                call(blocks)
            rounds.append((time.perf_counter() - tic) / calls * 1e6)
        print(f"{label}: {min(rounds):.1f} us/call (best of 5 x {calls}; median {sorted(rounds)[2]:.1f})")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        call(None)
    profile.disable()
    rows = sorted(((ct, nc, f"{os.path.basename(fn)}:{func}") for (fn, _, func), (_, nc, _, ct, _)
                   in pstats.Stats(profile).stats.items()), reverse=True)
    print(f"cProfile of {calls} calls (default blocks), top cumulative:")
    for ct, nc, name in rows[:20]:
        print(f"  {name:50s} calls {nc:7d} cum {ct:6.3f} s ({ct / calls * 1e6:7.1f} us/call)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
