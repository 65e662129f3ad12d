"""The docs' performance figures, generated from the committed rows (issue 45).

    python -m runners.docs_numbers            rewrite every marked block of README.md and docs/results.md
    python -m runners.docs_numbers --check    exit 1, one line per block that differs from what its rows give

A marked block is Markdown between ``<!-- numbers:NAME -->`` and ``<!-- /numbers -->``. When the opening marker
ends its line the block is whole lines (a table, a paragraph); otherwise it is a phrase inside a line. Each NAME is
declared once, in BLOCKS: the committed tables it reads and the function that renders it. A renderer gets the rows
of its tables (``T.load``, the newest row per point) and returns the block's text; every figure in it is computed
from the best correct config per variant and cell, as plots.report's best table computes it.
"""
from __future__ import annotations

import argparse
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from runners import tables as T

REPO = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/results.md")
BLOCK = re.compile(r"<!-- numbers:(?P<name>[\w.-]+) -->(?P<body>.*?)<!-- /numbers -->", re.S)
FA2, CUDNN, FLEX = "sdpa_flash", "sdpa_cudnn", "flex"
WIDTH = 115  # the docs' line length
H100_GRID = tuple(f"results/h100/gluon/h100_gluon_grid_{dtype}_tma_epilogue.parquet" for dtype in ("bf16", "fp16"))
H200_GRID = tuple(f"results/h200/gluon/h200_gluon_grid_{dtype}_tma_epilogue.parquet" for dtype in ("bf16", "fp16"))


def cells(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (GPU, dtype, shape) that some flash-bwd design has a correct result for: ``design`` (the fastest
    design there), ``tflops`` (its fastest correct config) and one column per other variant measured (its best
    TFLOPS). Rows are the newest per point, timings meaningful."""
    rows = T.latest(T.kernel_rows(df))
    best = T.best_config(rows[rows["timing_meaningful"] & T.is_result(rows)])
    out = []
    for _, g in best.groupby([T.GPU, "dtype", *T.SHAPE_COLUMNS], sort=False, dropna=False):
        tflops = g.set_index("variant")["tflops"]
        designs = tflops[tflops.index.map(T.is_triton).astype(bool)]
        if designs.empty:
            continue
        first = g.iloc[0]
        out.append({T.GPU: first[T.GPU], "dtype": first["dtype"], "shape": T.shape_text(first.drop("layout")),
                    "seq": first["seq"], "head_dim": first["head_dim"], "causal": bool(first["causal"]),
                    "design": designs.idxmax(), "tflops": designs.max(), **tflops.to_dict()})
    return pd.DataFrame(out).sort_values(["dtype", "seq", "head_dim", "causal"], kind="stable")


def ratio(c: pd.DataFrame, baseline: str) -> pd.Series:
    """The best design's TFLOPS over ``baseline``'s, per cell."""
    return c["tflops"] / c[baseline]


def span(values: pd.Series) -> str:
    """'1.30–1.80×': the smallest and largest ratio, two decimals."""
    return f"{values.min():.2f}–{values.max():.2f}×"


def files_text(paths) -> str:
    return ", ".join(f"`{p}`" for p in paths)


def prose(text: str) -> str:
    """A paragraph wrapped as the docs wrap theirs."""
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def fa_grid(df: pd.DataFrame) -> str:
    """The README's FA-grid table (the H100, bf16) and the range of the best design against FA2 and cuDNN on each
    GPU, bf16 and fp16."""
    c = cells(df)
    h100 = c[c[T.GPU].str.contains("H100")]
    bf16 = h100[h100["dtype"] == "bf16"]
    table = pd.DataFrame({
        "shape": bf16["shape"], "best flash-bwd design": bf16["design"], "TFLOPS": bf16["tflops"].map("{:.1f}".format),
        "FA2 (`sdpa_flash`)": bf16[FA2].map("{:.1f}".format), "cuDNN (`sdpa_cudnn`)": bf16[CUDNN].map("{:.1f}".format),
        "× FA2": ratio(bf16, FA2).map("{:.2f}".format), "× cuDNN": ratio(bf16, CUDNN).map("{:.2f}".format)})
    long = span(ratio(h100[h100["seq"] >= 4096], CUDNN))
    long = f" ({long} at N ≥ 4096)" if long != span(ratio(h100, CUDNN)) else ""
    h200 = c[c[T.GPU].str.contains("H200")]
    return "\n".join([
        prose("The FlashAttention papers' grid (tokens 16384, hidden 2048), bf16, on the H100 (from "
              f"{files_text(H100_GRID[:1])}):"), "", T.markdown_table(table),
        prose(f"Across the grid in bf16 and fp16 the best flash-bwd design is {span(ratio(h100, FA2))} "
              f"FlashAttention-2 and {span(ratio(h100, CUDNN))} cuDNN on the H100{long}, and {span(ratio(h200, FA2))} "
              f"and {span(ratio(h200, CUDNN))} on the H200. Rows: {files_text(H100_GRID + H200_GRID)}.")])


def fastest_cells(df: pd.DataFrame) -> str:
    """'ws is the fastest design on all 12 FlashAttention-grid cells on an H100, in bf16 and fp16'."""
    c = cells(df)
    top = c["design"].value_counts()
    design, n = top.index[0], int(top.iloc[0])
    shapes, dtypes = c["shape"].nunique(), " and ".join(sorted(c["dtype"].unique()))
    count = f"all {shapes}" if n == len(c) else f"{n} of the {len(c)} (shape, dtype)"
    return f"{design} is the fastest design on {count} FlashAttention-grid cells on an H100, in {dtypes}"


@dataclass(frozen=True)
class Block:
    paths: tuple[str, ...]  # committed tables, relative to the repository
    render: Callable[[pd.DataFrame], str]


BLOCKS: dict[str, Block] = {
    "fa_grid": Block(H100_GRID + H200_GRID, fa_grid),
    "fa_grid_fastest": Block(H100_GRID, fastest_cells),
}


def rows(block: Block, repo: Path = REPO) -> pd.DataFrame:
    return pd.concat([T.load(repo / path) for path in block.paths], ignore_index=True)


def render(name: str, repo: Path = REPO) -> str:
    if name not in BLOCKS:
        raise KeyError(f"unknown block {name!r}; known: {', '.join(BLOCKS)}")
    block = BLOCKS[name]
    return block.render(rows(block, repo)).strip("\n")


def update(text: str, render=render) -> tuple[str, list[str]]:
    """``text`` with every block's body rendered anew, and the names of the blocks whose body changed."""
    changed: list[str] = []

    def body(match: re.Match) -> str:
        name, old = match.group("name"), match.group("body")
        new = render(name)
        new = f"\n{new}\n" if old.startswith("\n") else new
        if new != old:
            changed.append(name)
        return f"<!-- numbers:{name} -->{new}<!-- /numbers -->"

    new = BLOCK.sub(body, text)
    if text.count("<!-- numbers:") != len(BLOCK.findall(text)):
        raise KeyError("a <!-- numbers:NAME --> marker without its <!-- /numbers -->")
    return new, changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.docs_numbers", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 when a block differs")
    parser.add_argument("files", nargs="*", help=f"Markdown files (default: {' '.join(DOCS)}, in this checkout)")
    args = parser.parse_args(argv)
    cache: dict[str, str] = {}

    def cached(name: str) -> str:
        if name not in cache:
            cache[name] = render(name)
        return cache[name]

    differs = 0
    for path in [Path(f) for f in args.files] or [REPO / doc for doc in DOCS]:
        text = path.read_text()
        try:
            new, changed = update(text, cached)
        except KeyError as error:
            print(f"{path}: {error.args[0]}", file=sys.stderr)
            return 2
        for name in changed:
            differs += 1
            print(f"{path}: block {name} differs from its rows" if args.check else f"{path}: block {name} rewritten")
        if changed and not args.check:
            path.write_text(new)
    return 1 if args.check and differs else 0


if __name__ == "__main__":
    raise SystemExit(main())
