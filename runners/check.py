"""Accuracy of every backward variant at realistic shapes, against the fp32 reference.

    python -m runners.check --seq 4096 --head-dims 64 128 --dtypes fp16 bf16 [--out errors.csv]

Prints one row per (variant, shape, dtype) with the relative error ||x - ref|| / ||ref|| of o, dq, dk, dv
and whether it is within the dtype's tolerance; exits 1 if any Triton variant is out of tolerance.
"""
import argparse
import sys

from spec import DTYPE_NAMES


def check_point(variant_name, batch, seq, heads, kv_heads, head_dim, causal, dtype, device="cuda") -> dict:
    import torch

    from runners.point.measure import check_accuracy  # first: it decides TRITON_INTERPRET before `import variants`
    from variants import get
    from variants.accuracy import error
    from variants.base import default_scale
    from variants.problem import Problem
    from variants.reference import reference_forward

    variant = get(variant_name)
    q, do = (torch.randn(batch, seq, heads, head_dim, device=device, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(batch, seq, kv_heads, head_dim, device=device, dtype=dtype) for _ in range(2))
    problem = Problem.from_tensors(q, k, v, causal)
    row = dict(variant=variant_name, batch=batch, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
               causal=causal, dtype=str(dtype).removeprefix("torch."))
    reason = variant.supports(problem)
    if reason:
        return {**row, "status": f"unsupported: {reason}"}
    scale = default_scale(head_dim)
    blocks = variant.make_blocks(problem)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o = variant.apply(*leaves, causal, scale, blocks)
    o.backward(do)
    grads = tuple(t.grad for t in leaves)
    o_error = error(o.detach(), reference_forward(q, k, v, causal, scale))
    del o, leaves
    grad_cols = check_accuracy(grads, q, k, v, do, causal, scale, dtype)  # the runner's gate: same reference
    ok = o_error.ok(dtype) and grad_cols["correct"]
    return {**row, "rel_o": o_error.rel, **{f"rel_{n}": grad_cols[f"rel_{n}"] for n in ("dq", "dk", "dv")},
            "accuracy_scope": grad_cols["accuracy_scope"], "status": "ok" if ok else "WRONG"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--gqa", type=int, default=4, help="also run heads:kv_heads = GQA:1 (0: skip)")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--dtypes", nargs="+", default=["fp16", "bf16"], choices=sorted(DTYPE_NAMES))
    parser.add_argument("--variants", nargs="+", help="default: every registered variant")
    parser.add_argument("--out", help="write the table as CSV here")
    args = parser.parse_args(argv)  # before the heavy imports: --help answers at once
    import pandas as pd
    import torch

    from runners.point.measure import check_accuracy  # noqa: F401 - first: it decides TRITON_INTERPRET before `variants`
    from variants import get, names
    from variants.base import TritonVariant
    from variants.problem import DTYPES

    args.variants = args.variants or names()
    rows = []
    kv_options = [args.heads] + ([args.heads // args.gqa] if args.gqa else [])
    for head_dim in args.head_dims:
        for dtype in args.dtypes:
            for causal in (False, True):
                for kv_heads in kv_options:
                    for name in args.variants:
                        if name == "reference":
                            continue
                        try:
                            row = check_point(name, args.batch, args.seq, args.heads, kv_heads, head_dim, causal,
                                              DTYPES[dtype])
                        except Exception as exc:  # a baseline that refuses at run time is a row, not a crash
                            row = dict(variant=name, head_dim=head_dim, dtype=dtype, causal=causal, kv_heads=kv_heads,
                                       status=f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                        rows.append(row)
                        print({k: (f"{v:.2e}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
                        torch.cuda.empty_cache()
    table = pd.DataFrame(rows)
    if args.out:
        table.to_csv(args.out, index=False)
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.float_format", "{:.1e}".format):
        print(table.drop(columns=["batch", "seq", "heads"], errors="ignore").to_string(index=False))
    triton_names = {n for n in args.variants if isinstance(get(n), TritonVariant)}
    bad = table[table.variant.isin(triton_names) & (table.status != "ok")]
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main())
