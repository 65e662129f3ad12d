"""Issue 44 on a GPU: where the host time of a warm eager `attention()` forward + backward goes, at issue 44's two
shapes (B1 N256 H2 D64 and B1 N1024 H4 D128, causal, bf16). Per design: three rounds of 200 unsynchronised calls
(host ms: mean, median) and 50 synchronised ones (median), a cProfile of 200 calls (own time) and torch.profiler's
CPU self time of 50 calls. Not rows (runners.host_cost makes those): a profile to read.

    python scripts/host_profile_gpu.py [ws,ws_two_pass,two_pass,sdpa_cudnn] > profile.txt
"""
import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from runners.host_cost import time_block  # noqa: E402
from variants import attention  # noqa: E402

SHAPES = ((256, 2, 64), (1024, 4, 128))  # (N, H, D) at B1
DESIGNS = ("ws", "ws_two_pass", "two_pass", "sdpa_cudnn")


def inputs(seq: int, heads: int, head_dim: int) -> tuple:
    """Leaves q, k, v (requires_grad) and do, [1, N, H, D] bf16 on the GPU."""
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn((1, seq, heads, head_dim), generator=gen).to("cuda", torch.bfloat16) for _ in range(4))
    return (*(t.requires_grad_(True) for t in (q, k, v)), do)


def call(variant: str, q, k, v, do):
    o = attention(q, k, v, causal=True, variant=variant)
    return torch.autograd.grad(o, (q, k, v), do)


def synced_ms(one_call, calls: int) -> list[float]:
    """Wall ms of each of `calls` calls, each followed by a synchronisation."""
    times = []
    for _ in range(calls):
        tic = time.perf_counter()
        one_call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - tic) * 1e3)
    return times


def print_cprofile(title: str, one_call, calls: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        one_call()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
    print(f"==== cProfile {title} ({calls} calls, tottime)")
    print(text.getvalue()[-4000:])


def print_torch_profile(title: str, one_call, calls: int) -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            one_call()
    torch.cuda.synchronize()
    print(f"==== torch.profiler {title} ({calls} calls)")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def main(designs) -> None:
    rows = []
    for seq, heads, head_dim in SHAPES:
        x = inputs(seq, heads, head_dim)
        for name in designs:
            def one_call():
                return call(name, *x)
            time_block(one_call, 30)  # warm-up
            torch.cuda.synchronize()
            for rep in range(3):
                host = torch.tensor(time_block(one_call, 200))
                torch.cuda.synchronize()
                synced = torch.tensor(synced_ms(one_call, 50))
                rows.append((seq, name, rep, float(host.mean()), float(host.median()), float(synced.median())))
            if name != "sdpa_cudnn":
                print_cprofile(f"{name} N{seq}", one_call, 200)
            print_torch_profile(f"{name} N{seq}", one_call, 50)
    print("N design rep host_mean_ms host_median_ms synced_median_ms")
    for row in rows:
        print(*[f"{value:.3f}" if isinstance(value, float) else value for value in row])


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else DESIGNS)
