"""Issue 44 on a GPU: where the host time of a warm eager `attention()` forward + backward goes, at issue 44's two
shapes (B1 N256 H2 D64 and B1 N1024 H4 D128, causal, bf16). Per design: three rounds of 200 unsynchronised calls
(host ms: mean, median) and 50 synchronised ones (median), a cProfile of 200 calls (own time) and torch.profiler's
CPU self time of 50 calls. Not rows (runners.host_cost makes those): a profile to read.

    python scripts/host_profile_gpu.py [ws,ws_two_pass,two_pass,sdpa_cudnn] > profile.txt
"""
import cProfile, io, pstats, sys, time
import torch
from variants import attention

def inputs(n, h, d):
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn((1, n, h, d), generator=g).to("cuda", torch.bfloat16) for _ in range(4))
    return (*(t.requires_grad_(True) for t in (q, k, v)), do)

def call(variant, q, k, v, do):
    o = attention(q, k, v, causal=True, variant=variant)
    return torch.autograd.grad(o, (q, k, v), do)

designs = sys.argv[1].split(",") if len(sys.argv) > 1 else ["ws", "ws_two_pass", "two_pass", "sdpa_cudnn"]
rows = []
for n, h, d in ((256, 2, 64), (1024, 4, 128)):
    x = inputs(n, h, d)
    for name in designs:
        for _ in range(30):
            call(name, *x)
        torch.cuda.synchronize()
        for rep in range(3):
            t = []
            for _ in range(200):
                tic = time.perf_counter(); call(name, *x); t.append(time.perf_counter() - tic)
            torch.cuda.synchronize()
            ts = []
            for _ in range(50):
                tic = time.perf_counter(); call(name, *x); torch.cuda.synchronize(); ts.append(time.perf_counter() - tic)
            t = torch.tensor(t) * 1e3; ts = torch.tensor(ts) * 1e3
            rows.append((n, name, rep, float(t.mean()), float(t.median()), float(ts.median())))
        if name != "sdpa_cudnn":
            pr = cProfile.Profile(); pr.enable()
            for _ in range(200):
                call(name, *x)
            pr.disable(); torch.cuda.synchronize()
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
            print(f"==== cProfile {name} N{n} (200 calls, tottime)"); print(s.getvalue()[-4000:])
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(50):
                call(name, *x)
        torch.cuda.synchronize()
        print(f"==== torch.profiler {name} N{n} (50 calls)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
print("N design rep host_mean_ms host_median_ms synced_median_ms")
for r in rows:
    print(*[f"{v:.3f}" if isinstance(v, float) else v for v in r])
