"""One design's backward (or, with --timed forward, its forward) on one shape, run under Nsight Compute: warm-up
launches first, so that `ncu --launch-skip` can skip compilation and warm-up and profile one steady launch.

    ncu --kernel-name regex:_ws_backward --launch-skip 2 --launch-count 1 --section WarpStateStats \\
        python scripts/ncu_backward.py --variant ws --seq 4096 --head-dim 128 [--causal] [--blocks '{"num_stages": 3}']

Checks nothing and times nothing: correctness and timings come from runners.sweep rows.
"""
import argparse
import json
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from variants import get  # noqa: E402
from variants.base import default_scale  # noqa: E402
from variants.problem import DTYPES, Problem  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="ws")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=None, help="K / V heads (GQA: fewer; default --heads)")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--head-dim-v", type=int, default=None, help="V's head dim (MLA: 128 beside 192; default --head-dim)")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--blocks", default="{}", help="block overrides, a JSON object")
    parser.add_argument("--launches", type=int, default=3, help="runs (ncu: skip all but the last)")
    parser.add_argument("--timed", default="backward", choices=["backward", "forward"],
                        help="forward: the design's forward as the runner's timed=forward calls it (a Triton design: "
                             "its default forward choice; a baseline: its own, on inputs that require grad)")
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]
    variant = get(args.variant)
    kv_heads, head_dim_v = args.kv_heads or args.heads, args.head_dim_v or args.head_dim

    def randn(heads: int, dim: int):  # [B, N, heads, dim]
        return torch.randn(args.batch, args.seq, heads, dim, device="cuda", dtype=dtype)

    q, k, v, do = randn(args.heads, args.head_dim), randn(kv_heads, args.head_dim), randn(kv_heads, head_dim_v), \
        randn(args.heads, head_dim_v)
    problem = Problem.from_tensors(q, k, v, args.causal)
    variant.check(problem)
    blocks = variant.make_blocks(problem, json.loads(args.blocks))
    if args.timed == "forward":  # the runner's own timed=forward closure (a Triton design: its default forward)
        from runners.point.timed import prepare
        point = SimpleNamespace(causal=args.causal, head_dim=args.head_dim, timed="forward", blocks=blocks)
        run = prepare(variant, point, problem, (q, k, v, do, None, None, None), None)
    else:
        run = variant.prepare(q, k, v, do, args.causal, default_scale(args.head_dim), blocks)
    for _ in range(args.launches):
        run()
    torch.cuda.synchronize()
    print(f"{args.variant} {blocks.as_dict()}: {args.launches} {args.timed} runs")


if __name__ == "__main__":
    main()
