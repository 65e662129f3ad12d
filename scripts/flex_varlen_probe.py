"""Where does compiled FlexAttention spend its time on a packed (document-masked) batch? One GPU, prints the time of
each step (block mask, first forward = compile, first backward = compile, then steady-state calls), and dumps every
thread's stack each 60 s so a hang shows where it is.   python scripts/flex_varlen_probe.py [tokens] [head_dim]"""
import faulthandler
import sys
import time

import torch

faulthandler.dump_traceback_later(60, repeat=True)
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
head_dim = int(sys.argv[2]) if len(sys.argv) > 2 else 64
heads = 2048 // head_dim
gen = torch.Generator().manual_seed(0)
lens = (torch.empty(64).log_normal_(7.0, 1.0, generator=gen).clamp(1, tokens).long()).tolist()
docs, total = [], 0
for n in lens:
    n = min(n, tokens - total)
    docs.append(n)
    total += n
    if total == tokens:
        break
cu = torch.tensor([0, *torch.tensor(docs).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
print(f"{len(docs)} docs, {tokens} tokens, H{heads} D{head_dim}", flush=True)
q, k, v, do = (torch.randn(tokens, heads, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(4))

from variants import attention  # noqa: E402

start = time.perf_counter()
for step in range(4):
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    t0 = time.perf_counter()
    o = attention(*leaves, causal=True, variant="flex", cu_seqlens_q=cu, cu_seqlens_k=cu)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    o.backward(do)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(f"call {step}: forward {t1 - t0:.2f} s, backward {t2 - t1:.2f} s (total {t2 - start:.1f} s)", flush=True)
faulthandler.cancel_dump_traceback_later()
