"""The compiled-resources table of one commit: every stock design's kernels at their default blocks, compiled for
every architecture on a CPU (runners.compile_check), one row per (arch, design, head dim, causal, dtype, kernel).

    python -m runners.compiled_table [--arch sm80,...] [--variants two_pass,...] [--head-dims 64,128,256] \
        [--dtypes bf16,fp16] [--causal false,true] [--out results/compiled/compiled_<sha7>.csv]

Columns: runners.compile.resources.COLUMNS plus `commit`, `dirty` (as in every result row: tracked files differ
from HEAD; runners.point.env.code_version), `timestamp` (UTC) and `triton` (the compiler's version).
`runners.regress baseline=<table> candidate=<table>` compares two of them (runners/regression/compiled.py): new
spills, a config that no longer fits, registers up by more than a margin.
Takes about 10-20 minutes on 2 cores (cold Triton cache); no GPU.
"""
import argparse
import sys
import time
from pathlib import Path

from runners.compile.arch_limits import ARCHS, ArchError, parse_archs

COMMIT_COLUMNS = ["commit", "dirty", "timestamp", "triton"]
OUT_DIR = Path(__file__).resolve().parents[2] / "results" / "compiled"


def build(archs, variants, head_dims, dtypes, causals=(False, True), log=print) -> list[dict]:
    """Rows (compile_check.COLUMNS) of the whole matrix, default blocks of each architecture."""
    from runners.compile.resources import check
    rows = []
    for arch in archs:
        for variant in variants:
            for head_dim in head_dims:
                for causal in causals:
                    for dtype in dtypes:
                        started = time.time()
                        got = check(variant, head_dim, dtype, causal, 16, 16, {}, arch=arch)
                        rows += got
                        bad = [r["kernel"] + ": " + r["status"] for r in got if r["status"] != "ok"]
                        log(f"{arch.name} {variant} D{head_dim} {dtype}{' causal' if causal else ''}: "
                            f"{len(got)} kernels, {time.time() - started:.1f} s{'; ' + '; '.join(bad) if bad else ''}")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default=",".join(ARCHS))
    parser.add_argument("--variants", help="comma list (default: the registry's stock Triton designs)")
    parser.add_argument("--head-dims", default="64,128,256")
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--causal", default="false,true", help="comma list of false / true")
    parser.add_argument("--out", help="default: results/compiled/compiled_<sha7>.csv")
    args = parser.parse_args(argv)
    try:
        archs = parse_archs(args.arch)
        head_dims = [int(d) for d in args.head_dims.split(",")]
        causals = [{"false": False, "true": True}[c.strip().lower()] for c in args.causal.split(",")]
    except (ArchError, ValueError, KeyError) as exc:
        print(f"compiled_table: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    import pandas as pd

    from runners.compile.arch_defaults import stock_designs
    from runners.compile.resources import COLUMNS, use_compiler_not_interpreter
    use_compiler_not_interpreter()
    import triton

    variants = args.variants.split(",") if args.variants else stock_designs()
    from runners.point import env
    version = env.code_version()  # the commit and dirty flag every result row carries
    sha, dirty = version["commit"], version["dirty"]
    rows = build(archs, variants, head_dims, args.dtypes.split(","), causals,
                 log=lambda text: print(text, file=sys.stderr, flush=True))
    table = pd.DataFrame(rows, columns=COLUMNS).assign(
        commit=sha, dirty=dirty, timestamp=pd.Timestamp.now(tz="UTC").isoformat(), triton=triton.__version__)
    counts = ["num_warps", "num_stages", "n_regs", "spill_store_bytes", "spill_load_bytes", "smem_bytes",
              "programs_per_sm"]
    table[counts] = table[counts].astype("Int64")  # integers, empty where a kernel did not compile (not 0.0)
    out = Path(args.out) if args.out else OUT_DIR / f"compiled_{sha[:7]}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    print(f"wrote {out}: {len(table)} rows, {sorted(table['status'].str.split(':').str[0].value_counts().items())}")
    return 0

