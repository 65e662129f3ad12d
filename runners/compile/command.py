"""The command line of `python -m runners.compile_check`: its arguments, the rows it prints and the CSV it writes.
What it compiles and how: runners/compile/resources.py (a backward's kernels) and runners/compile/forward.py (the
Gluon forward, `--forward gluon`); both are libraries this command calls, neither calls back.
"""
import argparse
import json
import sys

from runners.compile import resources
from runners.compile.arch_limits import ARCHS, DEFAULT_ARCH, ArchError, parse_archs
from runners.compile.forward import check_forward_kernel, format_forward_row
from runners.compile.resources import COLUMNS, CompileCheckError, check, format_row, parse_blocks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=resources.__doc__.splitlines()[0])
    parser.add_argument("--variant", default="two_pass")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--head-dim-v", type=int, help="V's head dim (issue 47, MLA: 128 beside --head-dim 192); "
                                                       "default: --head-dim")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, help="default: --heads (GQA: fewer)")
    parser.add_argument("--arch", default=DEFAULT_ARCH,
                        help=f"comma list of {', '.join(ARCHS)} (default {DEFAULT_ARCH}; "
                             "runners/compile/arch_limits.py)")
    parser.add_argument("--blocks", action="append", default=[],
                        help="overrides of the architecture's defaults: FIELD=VALUE,... or a JSON object; "
                             "repeat for a sweep")
    parser.add_argument("--window", type=int, help="a sliding window of this many keys left of the diagonal "
                                                   "(and right of it when not causal), as the sweep's window=")
    parser.add_argument("--softcap", type=float, default=0.0, help="logit softcapping (0 = off)")
    parser.add_argument("--gate", action="store_true", help="FLA's forget gate (needs --causal)")
    parser.add_argument("--kernels", nargs="+", help="only these kernels (e.g. _dkdv_kernel)")
    parser.add_argument("--out", help="write the rows as CSV here")
    parser.add_argument("--forward", choices=["gluon"], help="the Gluon forward's kernel (kernels/gluon/forward.py; "
                                                             "runners/compile/forward.py) instead of a backward")
    args = parser.parse_args(argv)  # before the heavy imports: --help answers at once
    if args.forward:
        return forward_main(args)
    kv_heads = args.kv_heads or args.heads
    rows = []
    try:
        archs = parse_archs(args.arch)
        configs = [parse_blocks(text) for text in args.blocks] or [{}]
        modifiers = dict(window=args.window, softcap=args.softcap, gate=args.gate, head_dim_v=args.head_dim_v)
        for overrides in configs:
            for arch in archs:
                config_rows = check(args.variant, args.head_dim, args.dtype, args.causal, args.heads, kv_heads,
                                    overrides, args.kernels, arch, modifiers)
                if config_rows:
                    first = config_rows[0]
                    dims = f"D{args.head_dim}" + (f"/{args.head_dim_v}" if args.head_dim_v else "")
                    print(f"{args.variant} {dims} {args.dtype}{' causal' if args.causal else ''} "
                          f"H{args.heads}/{kv_heads}{' ' + first['modifiers'] if first['modifiers'] else ''} "
                          f"{arch.name} ({first['blocks_source']})  {first['blocks']}", flush=True)
                for row in config_rows:
                    print("  " + format_row(row), flush=True)
                rows += config_rows
                if args.out:  # after every config: a sweep cut short keeps what it compiled
                    write_csv(args.out, rows)
    except (CompileCheckError, ArchError, json.JSONDecodeError, ValueError) as exc:
        print(f"compile_check: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


def forward_main(args) -> int:
    """`--forward gluon`: the forward's rows (runners/compile/forward.py) for each --blocks and --arch."""
    try:
        for overrides in [parse_blocks(text) for text in args.blocks] or [{}]:
            for arch in parse_archs(args.arch):
                row = check_forward_kernel(args.head_dim, args.causal, args.dtype, overrides, arch)
                print(format_forward_row(row), flush=True)
    except (ArchError, json.JSONDecodeError, ValueError, TypeError) as exc:
        print(f"compile_check: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


def write_csv(path: str, rows: list[dict]) -> None:
    import csv
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)

