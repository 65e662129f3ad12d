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
from runners.tables import current as C
from runners.tables import tier_log

REPO = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/results.md", "docs/host_cost.md")
BLOCK = re.compile(r"<!-- numbers:(?P<name>[\w.-]+) -->(?P<body>.*?)<!-- /numbers -->", re.S)
FA2, CUDNN, FLEX, FA4 = "sdpa_flash", "sdpa_cudnn", "flex", "fa4"
WIDTH = 115  # the docs' line length
H100_GRID = C.paths("h100", "fa_grid")  # with FA4
H200_GRID = C.paths("h200", "fa_grid")
WS_FA4_GRID = C.paths("h100", "ws_fa4_grid") + C.paths("h200", "ws_fa4_grid")  # ws, cuDNN, FA4 only
WS_FA4_CAUSAL_GQA = C.paths("h100", "ws_fa4_causal_gqa")  # the newest: causal FA grid and issue 43's GQA cells
STOCK_GRID = C.paths("h100", "stock_grid")  # the FA grid before the Gluon designs (issue 9)
LARGE_D = C.paths("h100", "large_d") + C.paths("h200", "large_d")  # FA4 on the H100
# GQA, packed, window, softcap beside FA4; the H100's GQA cells newer at ws's group_split defaults (issue 43; bf16)
FA4_CASES = (C.paths("h100", "fa4_cases") + tuple(path for path in C.paths("h100", "gqa_defaults") if "bf16" in path)
             + C.paths("h200", "fa4_cases"))
HEADDIMS = C.paths("h100", "stock_headdims") + C.paths("h200", "stock_headdims")
LARGE_DIMS = (96, 192, 256)
H200_FA_GRID = ("results/h200/fa_grid.parquet",)  # history: the H200's first FA grid (issue 5), docs/results.md
H200_ISSUE3 = C.paths("h200", "seq_sweep")
MODEL_STEP = C.paths("h100", "model_step")  # the fp32-truth gate's rows
HOST_COST = C.paths("h100", "host_cost") + C.paths("h200", "host_cost")  # issue 44: host ms of one eager call
HOST_DESIGNS = ("ws", "ws_two_pass", "two_pass")  # the designs issue 44's targets name
STEP_COLUMNS = {"ws": "ws", "two_pass": "two_pass", "cuDNN": CUDNN, "FA2": FA2, "flex": FLEX}
STEP_MODES = ("reduce-overhead", "eager")  # compiled with CUDA graphs / eager
TUNE = C.paths("h100", "tune")  # the tuner's studies, the exhaustive grid
TIER_LOG = "results/h100/test_tiers/tiers.log"  # scripts/gpu_test_tiers.sh's line per run
TIER_DETAIL = {"fast": "results/h100/test_tiers/fast_cold.log",  # each tier's pytest output, linked from its row
               "full -n 12": "results/h100/test_tiers/full_cold_xdist12.log",
               "full": "results/h100/test_tiers/full_cold_timed_out.log"}
CI_ROW = ("| full suite (CI) | CPU, 2 cores | no committed log holds this time: `time bash .ci/run` on a fresh clone "
          "measures it ([docs/testing.md](docs/testing.md) lists the runs reported so far) |")


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
                    "gqa": bool(first["kv_heads"] < first["heads"]),
                    "design": designs.idxmax(), "tflops": designs.max(), **tflops.to_dict()})
    return pd.DataFrame(out).sort_values(["dtype", "seq", "head_dim", "causal"], kind="stable")


def ratio(c: pd.DataFrame, baseline: str) -> pd.Series:
    """The best design's TFLOPS over ``baseline``'s, per cell."""
    return c["tflops"] / c[baseline]


def span(values: pd.Series) -> str:
    """'1.30–1.80×': the smallest and largest ratio, two decimals."""
    return f"{values.min():.2f}–{values.max():.2f}×"


def span3(values: pd.Series) -> str:
    """'0.908–0.998×': as span, three decimals (a ratio just under 1 is not 1.00)."""
    return f"{values.min():.3f}–{values.max():.3f}×"


def files_text(paths) -> str:
    return ", ".join(f"`{p}`" for p in paths)


def prose(text: str) -> str:
    """A paragraph wrapped as the docs wrap theirs."""
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def fa_grid(df: pd.DataFrame) -> str:
    """The README's FA-grid table (the H100, bf16) and the range of the best design against FA2, cuDNN and FA4 on
    each GPU, bf16 and fp16."""
    c = cells(df)
    h100 = c[c[T.GPU].str.contains("H100")]
    bf16 = h100[h100["dtype"] == "bf16"]
    columns = {"shape": bf16["shape"], "best flash-bwd design": bf16["design"],
               "TFLOPS": bf16["tflops"].map("{:.1f}".format)}
    baselines = [(FA2, "FA2 (`sdpa_flash`)", "× FA2"), (CUDNN, "cuDNN (`sdpa_cudnn`)", "× cuDNN"),
                 (FA4, "FA4 (`fa4`)", "× FA4")]
    baselines = [b for b in baselines if b[0] in bf16 and bf16[b[0]].notna().any()]
    columns.update({title: bf16[name].map("{:.1f}".format) for name, title, _ in baselines})
    columns.update({title: ratio(bf16, name).map("{:.2f}".format) for name, _, title in baselines})
    long = span(ratio(h100[h100["seq"] >= 4096], CUDNN))
    long = f" ({long} at N ≥ 4096)" if long != span(ratio(h100, CUDNN)) else ""
    h200 = c[c[T.GPU].str.contains("H200")]

    def against_fa4(*groups) -> str:
        measured = [(gpu, g.dropna(subset=[FA4])) for gpu, g in groups if FA4 in g and g[FA4].notna().any()]
        spans = " and ".join(f"{span(ratio(g, FA4))} on the {gpu}" for gpu, g in measured)
        return f"; against FlashAttention-4 it is {spans}" if measured else ""

    return "\n".join([
        prose("The FlashAttention papers' grid (tokens 16384, hidden 2048), bf16, on the H100 (from "
              f"{files_text(H100_GRID[:1])}):"), "", T.markdown_table(pd.DataFrame(columns)),
        prose(f"Across the grid in bf16 and fp16 the best flash-bwd design is {span(ratio(h100, FA2))} "
              f"FlashAttention-2 and {span(ratio(h100, CUDNN))} cuDNN on the H100{long}, and {span(ratio(h200, FA2))} "
              f"and {span(ratio(h200, CUDNN))} on the H200{against_fa4(('H100', h100), ('H200', h200))}. "
              f"Rows: {files_text(H100_GRID + H200_GRID)}.")])


def ws_fa4_grid(df: pd.DataFrame) -> str:
    """One sentence: ws at its commit's defaults against FA4 and cuDNN on the FA grid, per GPU, from the runs that
    timed only ws, cuDNN and FA4 (newer than the every-design tables above)."""
    c = cells(df)
    parts = []
    for gpu in ("H100", "H200"):
        g = c[c[T.GPU].str.contains(gpu)]
        if g.empty:
            continue
        commits = ", ".join(sorted({str(x)[:7] for x in df.loc[df[T.GPU].str.contains(gpu), "commit"]}))
        long = g[g["seq"] >= 4096]
        parts.append(f"on the {gpu} (at {commits}) {span3(ratio(g, FA4))} FA4 ({span3(ratio(long, FA4))} at N ≥ 4096) "
                     f"and {span(ratio(g, CUDNN))} cuDNN")
    return prose(f"The newer runs of ws beside cuDNN and FlashAttention-4 alone (bf16 and fp16, issue 43's defaults "
                 f"of their commit): ws is {'; '.join(parts)}. Rows: {files_text(WS_FA4_GRID)}.")


def ws_fa4_causal_gqa(df: pd.DataFrame) -> str:
    """One paragraph: the newest run of ws beside FA4 and cuDNN, the FA grid's causal cells and issue 43's GQA cells
    (backward rows; the forward's are in the run's README)."""
    c = cells(df[df["timed"] == "backward"])
    grid, gqa = c[~c["gqa"]], c[c["gqa"]]
    commits = ", ".join(sorted({str(x)[:7] for x in df["commit"]}))
    gpus = ", ".join(sorted({name for name in ("H100", "H200") if c[T.GPU].str.contains(name).any()}))
    long = grid[grid["seq"] >= 4096]
    listed = "; ".join(f"{row['shape']} {row['tflops'] / row[FA4]:.2f}×"  # the shape text says causal
                       for _, row in gqa.sort_values(["head_dim", "shape", "causal"]).iterrows())
    return prose(f"The newest run ({gpus}, at {commits}, bf16, backward): on the FA grid's causal cells ws is "
                 f"{span(ratio(grid, FA4))} FA4 ({span(ratio(long, FA4))} at N ≥ 4096) and {span(ratio(grid, CUDNN))} "
                 f"cuDNN; beside FA4 on issue 43's GQA cells: {listed}. Rows: {files_text(WS_FA4_CAUSAL_GQA)}.")


def fa4_cases(df: pd.DataFrame) -> str:
    """GQA, packed documents, a window and a softcap: the best flash-bwd design against FA4 and cuDNN, per case."""
    rows = T.latest(T.kernel_rows(df))
    best = T.best_config(rows[rows["timing_meaningful"] & T.is_result(rows)])

    def case(r) -> str:
        if r["heads"] != r["kv_heads"]:
            text = f"B{r['batch']} H{r['heads']}/{r['kv_heads']} N{r['seq']} D{r['head_dim']} (GQA)"
        elif str(r.get("varlen_dist")) not in ("none", "None", "nan"):
            text = f"packed {r['varlen_dist']} documents, {r['tokens_total']} tokens, D{r['head_dim']}"
        elif r.get("window_left", -1) >= 0:
            text = f"B{r['batch']} N{r['seq']} D{r['head_dim']} window {r['window_left']}"
        else:
            text = f"B{r['batch']} N{r['seq']} D{r['head_dim']} softcap {r['softcap']:g}"
        return text + (" causal" if r["causal"] else "")
    best = best.assign(case=best.apply(case, axis=1), gpu=gpu_name)
    refused = rows[rows["status"] == "unsupported"]
    refused = set(zip(refused.apply(case, axis=1), refused["variant"])) if len(refused) else set()
    out = []
    for (gpu, name), g in best.groupby(["gpu", "case"], sort=False):
        tflops = g.set_index("variant")["tflops"]
        designs = tflops[tflops.index.map(T.is_triton).astype(bool)]
        if designs.empty:
            continue
        cell = {"GPU": gpu, "case (bf16)": name, "best flash-bwd design": designs.idxmax(),
                "TFLOPS": f"{designs.max():.1f}"}
        for baseline, title in ((FA4, "FA4"), (CUDNN, "cuDNN"), (FLEX, "flex")):
            value = tflops.get(baseline)
            missing = "refused" if (name, baseline) in refused else "–"
            cell[title] = missing if value is None or pd.isna(value) else f"{value:.1f}"
            cell[f"× {title}"] = "" if value is None or pd.isna(value) else f"{designs.max() / value:.2f}"
        out.append(cell)
    table = pd.DataFrame(out).sort_values("GPU", kind="stable")  # a GPU's cases together, newer tables' cases too
    return "\n".join([T.markdown_table(table).rstrip("\n"), "", prose(f"Rows: {files_text(FA4_CASES)}.")])


def host_cost(df: pd.DataFrame) -> str:
    """Issue 44's table: per shape and run (one runners.host_cost process: its sweep_id), host ms per eager call of
    ws, ws_two_pass and two_pass (plan path) against FA4's and cuDNN's (direct) in the same run, and the two ratios
    the issue bounds (<= 1.0x FA4, <= 1.5x cuDNN). Runs are kept apart: a repeat is a measurement, not a re-run."""
    rows = df[T.is_host_cost(df) & (df["status"] == "ok")]
    rows = rows[rows["call_path"].isin(["plan", "direct"])]
    out = []
    shape = ["batch", "seq", "heads", "head_dim", "causal", "dtype"]
    runs = {sweep_id: n + 1 for n, sweep_id in enumerate(sorted(rows["sweep_id"].unique(), key=lambda i: (
        rows.loc[rows["sweep_id"] == i, "timestamp"].min(), i)))}
    for (gpu, batch, seq, heads, head_dim, causal, dtype), by_shape in rows.groupby([T.GPU, *shape]):
        for sweep_id, g in sorted(by_shape.groupby("sweep_id"), key=lambda item: runs[item[0]]):
            ms = g.set_index("variant")["ms"]
            for design in HOST_DESIGNS:
                if design not in ms:
                    continue
                cell = {"GPU": gpu_name(g).iloc[0], "shape": f"B{batch} N{seq} H{heads} D{head_dim} {dtype}"
                        + (" causal" if causal else ""), "run": f"`{sweep_id}`", "design": design,
                        "ms": f"{ms[design]:.3f}"}
                for baseline, title, bound in ((FA4, "FA4", 1.0), (CUDNN, "cuDNN", 1.5)):
                    measured = baseline in ms
                    ratio = ms[design] / ms[baseline] if measured else float("nan")
                    cell[f"{title} ms"] = f"{ms[baseline]:.3f}" if measured else "–"
                    verdict = f"{ratio:.2f}" + ("" if ratio <= bound else " ✗")
                    cell[f"× {title} (≤ {bound:g})"] = verdict if measured else "–"
                out.append(cell)
    return "\n".join([T.markdown_table(pd.DataFrame(out)).rstrip("\n"), "",
                      prose(f"Rows: {files_text(HOST_COST)}.")])


def fastest_cells(df: pd.DataFrame) -> str:
    """'ws is the fastest design on all 12 FlashAttention-grid cells on an H100, in bf16 and fp16'."""
    c = cells(df)
    top = c["design"].value_counts()
    design, n = top.index[0], int(top.iloc[0])
    shapes, dtypes = c["shape"].nunique(), " and ".join(sorted(c["dtype"].unique()))
    count = f"all {shapes}" if n == len(c) else f"{n} of the {len(c)} (shape, dtype)"
    return f"{design} is the fastest design on {count} FlashAttention-grid cells on an H100, in {dtypes}"


def stock_grid(df: pd.DataFrame) -> str:
    """The stock-Triton designs on the FA grid against compiled FlexAttention and cuDNN (N ≥ 4096)."""
    c = cells(df)
    return (f"{span(ratio(c, FLEX))} compiled FlexAttention and {span(ratio(c[c['seq'] >= 4096], CUDNN))} cuDNN at "
            f"N ≥ 4096 on the H100")


def gpu_name(c: pd.DataFrame) -> pd.Series:
    return c[T.GPU].str.extract(r"(H\d00)", expand=False)


def large_d(df: pd.DataFrame) -> str:
    """The best design against cuDNN at the large head dims, which design per head dim, and the largest ratio."""
    c = cells(df)
    c = c[c["head_dim"].isin(LARGE_DIMS)].assign(x=lambda c: ratio(c, CUDNN), gpu=gpu_name)
    gpus = " and ".join(f"an {g}" for g in sorted(c["gpu"].unique()))
    by_d = c.groupby("design", sort=False)["head_dim"].unique()
    designs = "; ".join(f"{d} at " + " and ".join(f"D{int(h)}" for h in sorted(hs)) for d, hs in by_d.items())
    dims = sorted(c["head_dim"].unique())
    top = c.loc[c["x"].idxmax()]
    fa4 = ""
    if FA4 in c and c[FA4].notna().any():
        with_fa4 = c.dropna(subset=[FA4]).assign(x4=lambda c: ratio(c, FA4))
        per_d = "; ".join(f"D{int(d)}: {span(g['x4'])}" for d, g in with_fa4.groupby("head_dim"))
        fa4 = (f" Against FlashAttention-4 ({' and '.join(f'the {g}' for g in sorted(with_fa4['gpu'].unique()))}) "
               f"it is {per_d}.")
    return prose(f"Large head dims (B2 H16 N4096 bf16, causal and not): the best design is {span(c['x'])} cuDNN at "
                 f"D = {', '.join(str(int(d)) for d in dims[:-1])} and {int(dims[-1])} on both {gpus} ({designs}; "
                 f"highest at D{int(top['head_dim'])}{' causal' if top['causal'] else ''} on the {top['gpu']}: "
                 f"{top['tflops']:.1f} against cuDNN's {top[CUDNN]:.1f} TFLOPS).{fa4} Rows: {files_text(LARGE_D)}.")


def large_d_stock(df: pd.DataFrame) -> str:
    """two_pass against FA2 and cuDNN at the large head dims, both GPUs."""
    c = cells(df)
    c = c[c["head_dim"].isin(LARGE_DIMS)]
    return f"two_pass is {span(c['two_pass'] / c[FA2])} FA2 there and {span(c['two_pass'] / c[CUDNN])} cuDNN"


def h200_fa_grid(df: pd.DataFrame) -> str:
    """docs/results.md: the best stock design on the H200's FA grid against FA2, flex and cuDNN."""
    c = cells(df)
    causal, full = c[c["causal"]], c[~c["causal"]]
    return (f"Best flash-bwd design vs FlashAttention-2 (`sdpa_flash`): {span(ratio(full, FA2))} non-causal, "
            f"{span(ratio(causal, FA2))} causal; vs compiled FlexAttention {span(ratio(c, FLEX))}; vs cuDNN "
            f"{span(ratio(c, CUDNN))}.")


def sweep_size(df: pd.DataFrame) -> str:
    """'B=4, H=16, bf16, 72 points, all correct'."""
    rows = T.latest(T.kernel_rows(df))
    good = int(T.is_result(rows).sum())
    one = lambda col: ",".join(str(v) for v in sorted(rows[col].unique()))
    return (f"B={one('batch')}, H={one('heads')}, {one('dtype')}, {len(rows)} points, "
            + ("all correct" if good == len(rows) else f"{good} correct"))


def tune_vs_grid(df: pd.DataFrame) -> str:
    """The tuner's studies against the exhaustive grid of the same point: the slowest per-kernel study's best time
    and the joint study's, over the grid's best."""
    rows = df[T.is_result(df)]
    studies = rows["study"].fillna("").astype(str)
    grid = rows[studies == ""]
    best = rows[studies != ""].groupby(studies[studies != ""])["ms"].agg(["min", "size"]) / [grid["ms"].min(), 1]
    joint = best.index.str.endswith("-joint")
    kernel = best[~joint]
    return (f"found the exhaustive {len(grid)}-point grid's best config in {int(kernel['size'].max())} trials "
            f"({kernel['min'].max():.3f}× its time; one joint TPE study of {int(best[joint]['size'].iloc[0])} trials: "
            f"{best[joint]['min'].iloc[0]:.3f}×)")


def model_step(df: pd.DataFrame) -> str:
    """ms per training step, compiled with CUDA graphs / eager, per model config and design (the fastest of the
    shown designs in bold, per mode); the fastest compiled step of any design; the rows that are not ok."""
    rows = T.latest(T.step_rows(df))
    rows = rows.assign(label=[f"D{int(d)} N{int(n)}" for d, n in zip(rows["head_dim"], rows["seq"])])
    good = rows[T.is_result(rows)]
    ms = good.pivot_table(index=["head_dim", "seq", "label"], columns=["compile_mode", "variant"], values="ms")
    shown = list(STEP_COLUMNS.values())
    table = []
    for (_, _, label), r in ms.iterrows():
        fastest = {mode: r[mode].reindex(shown).min() for mode in STEP_MODES}  # NaN (not ok, not run) skipped
        cell = lambda mode, v: ("-" if pd.isna(r[mode].get(v)) else
                                f"**{r[mode][v]:.2f}**" if r[mode][v] == fastest[mode] else f"{r[mode][v]:.2f}")
        table.append({"model": label, **{name: " / ".join(cell(m, v) for m in STEP_MODES)
                                        for name, v in STEP_COLUMNS.items()}})
    compiled = ms[STEP_MODES[0]]
    name = {v: k for k, v in STEP_COLUMNS.items()}
    top = ", ".join(f"{name.get(step.idxmin(), step.idxmin())} {step.min():.2f} ({key[2]})"
                    for key, step in compiled.iterrows())
    bad = rows[~T.is_result(rows)]
    bad = "; ".join(f"{r.variant} {r.compile_mode} at {r.label}" for r in bad.itertuples()) or "none"
    return "\n".join([T.markdown_table(pd.DataFrame(table)),
                      prose(f"Fastest compiled step of any design: {top}. Rows not `ok` under the fp32-truth gate: "
                            f"{bad}. Rows: {files_text(MODEL_STEP)}.")])


def read_tiers(paths, repo: Path) -> pd.DataFrame:
    """The last run of each tier in the tier logs, with its pytest output's counts (``log_counts``; empty when the
    run has no summary line, as one stopped at the limit)."""
    runs = tier_log.latest(paths, repo)
    log = runs["tier"].map(TIER_DETAIL)
    if log.isna().any():
        raise KeyError(f"tiers {list(runs['tier'][log.isna()])} have no entry in TIER_DETAIL")
    last = lambda path: ([line for line in (repo / path).read_text().splitlines()
                          if tier_log.COUNTS.search(line) and " in " in line] or [""])[-1]
    return runs.assign(log=log, log_counts=[tier_log.counts(last(p)) for p in log])


def tier_name(tier: str, cache: str) -> str:
    """'fast' -> '`-m "not slow"`, cold Triton cache'; 'full -n 12' -> 'full suite, `-n 12`, cold Triton cache'."""
    words = tier.split(maxsplit=1)
    name = {"fast": '`-m "not slow"`', "full": "full suite"}[words[0]]
    workers = f", `{words[1]}`" if len(words) > 1 else ", one process" if words[0] == "full" else ""
    state = "cold" if cache == "cold" or cache.startswith("0 cached") else f"warm ({cache})"
    return f"{name}{workers}, {state} Triton cache"


def test_tiers(df: pd.DataFrame) -> str:
    """README's test-tier table: each GPU tier's wall time, GPU, commit and pytest counts from its last logged run;
    the CPU (CI) row says that no committed log holds its time."""
    out = ["| tier | where | wall time |", "|---|---|---|"]
    for r in df.sort_values("timed_out", kind="stable").itertuples():
        if r.log_counts and r.log_counts != r.counts:
            raise ValueError(f"{r.log} says {r.log_counts!r}, {TIER_LOG} says {r.counts!r}")
        where = f"on an {r.gpu} (commit {r.commit})"
        result = (f"over {r.wall_s} s {where}: stopped at the script's limit, no pytest summary" if r.timed_out
                  else f"{r.wall_s} s {where}: {r.counts}")
        out.append(f"| {tier_name(r.tier, r.cache)} | GPU | {result} ([log]({r.log}), [tiers.log]({TIER_LOG})) |")
    return "\n".join(out + [CI_ROW])


@dataclass(frozen=True)
class Block:
    paths: tuple[str, ...]  # committed tables, relative to the repository
    render: Callable[[pd.DataFrame], str]
    read: Callable[[tuple[str, ...], Path], pd.DataFrame] | None = None  # default: the parquet rows of ``paths``


BLOCKS: dict[str, Block] = {
    "fa_grid": Block(H100_GRID + H200_GRID, fa_grid),
    "fa_grid_fastest": Block(H100_GRID, fastest_cells),
    "ws_fa4_grid": Block(WS_FA4_GRID, ws_fa4_grid),
    "ws_fa4_causal_gqa": Block(WS_FA4_CAUSAL_GQA, ws_fa4_causal_gqa),
    "stock_grid": Block(STOCK_GRID, stock_grid),
    "large_d": Block(LARGE_D, large_d),
    "fa4_cases": Block(FA4_CASES, fa4_cases),
    "large_d_stock": Block(HEADDIMS, large_d_stock),
    "model_step_h100": Block(MODEL_STEP, model_step),
    "host_cost": Block(HOST_COST, host_cost),
    "tune_vs_grid": Block(TUNE, tune_vs_grid),
    "h200_fa_grid": Block(H200_FA_GRID, h200_fa_grid),
    "h200_issue3": Block(H200_ISSUE3, sweep_size),
    "test_tiers": Block((TIER_LOG,), test_tiers, read_tiers),
}


def rows(block: Block, repo: Path = REPO) -> pd.DataFrame:
    if block.read is not None:
        return block.read(block.paths, repo)
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
