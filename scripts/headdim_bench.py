"""Exploration on one GPU (issue 9, large head dims): two_pass's two kernels timed apart over candidate tiles,
each checked against the fp32 reference on one (batch, head) slice. A guide for conf/block_defaults.yaml, not a
result table (those come from runners.sweep: scripts/gpu_grid_headdims.sh headdims).

    python scripts/headdim_bench.py [--dims 192,256] [--causal 0,1] [--configs padded|split_d|d128|causal128|causal] [--budget 420] [--out DIR]

The two kernels' times add (results/h100/NOTES.md, issue 12: nearly separable), so the best pair is the best
dK/dV config plus the best dQ config. Prints one line per config and a table per shape last; writes
headdim_bench_<configs>_n<seq>.parquet to --out (default $OUT).
"""
import argparse
from itertools import zip_longest
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pandas as pd  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

import variants  # noqa: E402
from kernels.preprocess import attention_delta  # noqa: E402
from kernels.dkdv_dq import launch_dkdv, launch_dq  # noqa: E402
from variants.accuracy import REL_TOL, error  # noqa: E402
from variants.problem import Problem  # noqa: E402
from variants.reference import reference_grads  # noqa: E402

T0 = time.time()
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run of the script under TRITON_INTERPRET=1
DTYPE = torch.bfloat16 if DEV == "cuda" else torch.float32


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median") if DEV == "cuda" else 1.0
# (BLOCK_M1, BLOCK_N1, num_warps1, num_stages1, split_dkdv), in priority order (compile_check on the CPU: few spills)
DKDV = [(32, 32, 4, 1, False), (32, 128, 8, 2, True), (64, 64, 8, 2, False), (64, 128, 8, 1, True),
        (32, 64, 4, 2, True), (16, 64, 8, 2, False), (64, 64, 8, 2, True), (32, 64, 8, 2, False),
        (16, 128, 8, 2, True), (64, 64, 8, 1, False), (32, 128, 4, 2, True), (16, 64, 4, 1, False)]
# (BLOCK_M2, BLOCK_N2, num_warps2, num_stages2)
DQ = [(32, 32, 4, 1), (64, 64, 8, 2), (128, 32, 8, 2), (32, 64, 8, 2), (64, 32, 8, 2), (32, 32, 4, 2),
      (32, 64, 4, 2), (64, 64, 4, 2), (128, 64, 8, 1), (128, 32, 8, 1)]
# --configs split_d: the head dim in two register blocks (192 = 128 + 64), both kernels; the padded winners first
DKDV_SPLIT_D = [(64, 128, 8, 1, True, False), (32, 128, 8, 2, True, False), (64, 128, 8, 1, True, True),
                (32, 128, 8, 2, True, True), (64, 128, 8, 2, True, True), (64, 64, 8, 2, False, True),
                (32, 128, 8, 3, True, True), (128, 128, 8, 1, True, True)]
# --configs d128: does the split dK/dV pass let D=128 take 128-row key blocks (compile_check: 236 B of spills
# unsplit at 64x128 w8 s3, 0-32 B split)? The current defaults first
DKDV_D128 = [(32, 64, 4, 3, False), (64, 64, 4, 2, False), (64, 128, 8, 3, True), (64, 128, 8, 2, True),
             (64, 128, 8, 3, False), (32, 128, 8, 3, True)]
DQ_D128 = [(64, 64, 4, 2), (128, 64, 8, 3)]
# --configs causal128: does the causal D=128 winner depend on N? (at N=16384 the non-causal tiles won: 64x64 w4 s2
# dK/dV + 128x64 w8 s3 dQ; the causal rule was tuned at N=4096 without 2-stage dK/dV). Run at N 1024/4096/16384.
DKDV_CAUSAL128 = [(32, 64, 4, 3, False), (64, 64, 4, 2, False), (32, 64, 4, 2, False), (64, 64, 4, 3, False),
                  (64, 128, 8, 3, False), (64, 128, 8, 2, False), (32, 128, 8, 3, False)]
DQ_CAUSAL128 = [(64, 64, 4, 2), (128, 64, 8, 3), (128, 64, 8, 2), (64, 64, 4, 3), (128, 32, 4, 3)]
# --configs causal: the causal D=64 and D=128 cells of the FA grid at N 1024/4096/16384 (both head dims take the
# same candidates; the current causal defaults first)
DKDV_CAUSAL = [(32, 64, 4, 3, False), (64, 64, 4, 2, False), (64, 64, 4, 3, False), (32, 64, 4, 2, False),
               (64, 128, 8, 2, False), (64, 128, 8, 3, False), (32, 128, 8, 3, False), (32, 128, 4, 3, False)]
DQ_CAUSAL = [(64, 64, 4, 2), (64, 32, 4, 3), (128, 64, 8, 3), (128, 64, 8, 2), (64, 64, 4, 3), (128, 32, 4, 3),
             (128, 32, 8, 3)]
DQ_SPLIT_D = [(64, 64, 4, 2, False), (64, 64, 4, 2, True), (128, 32, 8, 2, True), (128, 64, 8, 2, True),
              (64, 64, 4, 3, True), (128, 64, 8, 1, True), (64, 64, 8, 2, True), (64, 128, 8, 1, True)]


def shape_inputs(d, causal, batch, seq, heads):
    torch.manual_seed(d + causal)
    q, k, v, do = (torch.randn(batch, seq, heads, d, device=DEV, dtype=DTYPE) for _ in range(4))
    impl = variants.get("two_pass")
    scale = d ** -0.5
    with torch.no_grad():
        o, lse = impl.forward(q, k, v, causal, scale)
    delta = attention_delta(o, do)
    one = (slice(0, 1), slice(None), slice(0, 1))  # batch 0, head 0: the accuracy gate's slice
    ref = reference_grads(q[one], k[one], v[one], do[one], causal)
    return dict(q=q, k=k, v=v, do=do, lse=lse, delta=delta, scale=scale, causal=causal, one=one, ref=ref[1:])


def time_dkdv(s, cfg):
    m, n, w, st, split, split_d = (*cfg, False)[:6]
    dq, dk, dv = torch.empty_like(s["q"]), torch.full_like(s["k"], float("nan")), torch.full_like(s["v"], float("nan"))

    def run():
        launch_dkdv(s["q"], s["k"], s["v"], s["do"], dq, dk, dv, s["lse"], s["delta"], causal=s["causal"],
                    scale=s["scale"], accumulate_dq=False, BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=st,
                    split=split, split_d=split_d)
    run()
    one = s["one"]
    err = max(error(dk[one], s["ref"][1]).rel, error(dv[one], s["ref"][2]).rel)
    return bench(run), err


def time_dq(s, cfg):
    m, n, w, st, split_d = (*cfg, False)[:5]
    dq = torch.full_like(s["q"], float("nan"))

    def run():
        launch_dq(s["q"], s["k"], s["v"], s["do"], dq, s["lse"], s["delta"], causal=s["causal"], scale=s["scale"],
                  BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=st, split_d=split_d)
    run()
    err = error(dq[s["one"]], s["ref"][0]).rel
    return bench(run), err


def baseline_ms(name, s):
    impl = variants.get(name)
    problem = Problem.from_tensors(s["q"], s["k"], s["v"], s["causal"])
    if impl.supports(problem):
        return float("nan")
    run = impl.prepare(s["q"], s["k"], s["v"], s["do"], s["causal"], s["scale"], impl.make_blocks(problem))
    return bench(run)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="192,256")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--budget", type=float, default=420)
    ap.add_argument("--configs", default="padded", choices=["padded", "split_d", "d128", "causal128", "causal"])
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args()
    print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name() if DEV == 'cuda' else 'cpu'}", flush=True)
    shapes = {(d, c): None for d in map(int, args.dims.split(",")) for c in map(bool, map(int, args.causal.split(",")))}
    rows = []
    for (d, causal) in shapes:
        s = shapes[(d, causal)] = shape_inputs(d, causal, args.batch, args.seq, args.heads)
        problem = Problem.from_tensors(s["q"], s["k"], s["v"], causal)
        for name in ("sdpa_flash", "sdpa_cudnn", "two_pass"):
            try:
                ms = baseline_ms(name, s)
            except Exception as exc:  # noqa: BLE001
                print(f"D{d} causal={causal} {name}: {type(exc).__name__}: {str(exc)[:150]}", flush=True)
                ms = float("nan")
            rows.append(dict(head_dim=d, causal=causal, kernel="backward", name=name, ms=ms, err=0.0,
                             tflops=problem.backward_flops() / (ms * 1e-3) / 1e12))
            print(f"D{d} causal={causal} {name:12s} {ms:8.3f} ms {rows[-1]['tflops']:6.1f} TFLOPS", flush=True)
    dkdv, dq = {"padded": (DKDV, DQ), "split_d": (DKDV_SPLIT_D, DQ_SPLIT_D), "d128": (DKDV_D128, DQ_D128),
                "causal128": (DKDV_CAUSAL128, DQ_CAUSAL128), "causal": (DKDV_CAUSAL, DQ_CAUSAL)}[args.configs]
    todo = [job for pair in zip_longest([("dkdv", c) for c in dkdv], [("dq", c) for c in dq]) for job in pair if job]
    for kernel, cfg in todo:
        for (d, causal), s in shapes.items():
            if time.time() - T0 > args.budget:
                break
            try:
                ms, err = (time_dkdv if kernel == "dkdv" else time_dq)(s, cfg)
                note = ""
            except Exception as exc:  # noqa: BLE001
                ms, err, note = float("nan"), float("nan"), f"{type(exc).__name__}: {str(exc)[:120]}"
            ok = err <= REL_TOL[DTYPE]
            rows.append(dict(head_dim=d, causal=causal, kernel=kernel, name=str(cfg), ms=ms if ok else float("nan"),
                             err=err, tflops=float("nan"), note=note))
            print(f"D{d} causal={causal} {kernel:4s} {str(cfg):28s} {'ok ' if ok else 'BAD'} {ms:8.3f} ms err {err:.1e} "
                  f"{note} [{time.time() - T0:.0f}s]", flush=True)
            torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    df["gpu_name"] = torch.cuda.get_device_name() if DEV == "cuda" else "cpu"
    df["batch"], df["heads"], df["seq"], df["configs"] = args.batch, args.heads, args.seq, args.configs
    if args.out:  # one file per call: several calls (e.g. one per N) can share one --out
        df.to_parquet(os.path.join(args.out, f"headdim_bench_{args.configs}_n{args.seq}.parquet"))
    print("\n| D | causal | FA2 | cuDNN | two_pass now | best dK/dV | ms | best dQ | ms | pair TFLOPS (+delta ~0) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (d, causal), s in shapes.items():
        here = df[(df.head_dim == d) & (df.causal == causal)]
        tf = {n: here[(here.kernel == "backward") & (here.name == n)].tflops.iloc[0] for n in ("sdpa_flash", "sdpa_cudnn", "two_pass")}
        best = {}
        for kernel in ("dkdv", "dq"):
            k = here[(here.kernel == kernel) & here.ms.notna()]
            best[kernel] = k.loc[k.ms.idxmin()] if len(k) else None
        if best["dkdv"] is None or best["dq"] is None:
            continue
        flops = Problem.from_tensors(s["q"], s["k"], s["v"], causal).backward_flops()
        pair = flops / ((best["dkdv"].ms + best["dq"].ms) * 1e-3) / 1e12
        print(f"| {d} | {causal} | {tf['sdpa_flash']:.0f} | {tf['sdpa_cudnn']:.0f} | {tf['two_pass']:.0f} | "
              f"{best['dkdv']['name']} | {best['dkdv'].ms:.3f} | {best['dq']['name']} | {best['dq'].ms:.3f} | {pair:.0f} |")


if __name__ == "__main__":
    main()
