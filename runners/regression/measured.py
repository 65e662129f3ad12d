"""Regression tracking: compare a candidate result table against a baseline, point by point.

    python -m runners.regress baseline=<path | commit> [candidate=<path>] [results=<path>] [threshold=0.05]
                              [cross_gpu=auto|true|false] [regs_margin=8] [out=<file.md>]

Sides
  baseline=<path>    every row under that parquet file / directory; candidate=<path> likewise (required).
  baseline=<commit>  (a hex sha prefix, or any git ref such as HEAD~1 that ``git rev-parse`` resolves, and not an
                     existing path): rows are read from results=<path> if given, else from candidate=<path>.
                     The baseline is the rows whose ``commit`` starts with that sha (one commit only); the
                     candidate is the rows of the newest *other* commit in the same tables (newest = latest
                     row timestamp) among those that measured one of the baseline's points on its GPU — or,
                     when results= and candidate= are both given, the newest such commit in candidate=.
  On each side a config measured more than once keeps its newest row (by timestamp).

Joining and the rule (same GPU)
  Rows join on (join_key, gpu_name). join_key (runners.tables.join_key) is the config_key less the block fields
  at their Blocks dataclass's declared default, so a block field added later with a default does not unjoin
  the rows measured before it. Only rows with status ok and correct are timed results. With
  lo = min(tflops_p20, tflops, tflops_p80) and hi = max(...) of a point (its pessimistic and optimistic ends):
      SLOWER   when  hi(candidate) < lo(baseline) × (1 - threshold)
  i.e. even the candidate's optimistic end lies more than ``threshold`` below the baseline's pessimistic end.
  This implies the median ratio is below 1 - threshold AND the two p20–p80 ranges are disjoint, so a change
  inside the measured run-to-run spread is never flagged. FASTER is the mirror image. A point slower than
  the threshold by its medians but not by the rule is reported as "slower (within noise)", not flagged.
  Points whose timings are not meaningful (CPU interpreter) are never speed-compared. A correct point whose
  tflops is NaN on either side (a model-step row: its step ms) cannot be compared: "no tflops", printed and
  counted in the summary, never a regression.

Correctness (always reported, whatever the speed)
  WRONG       the candidate's gradients are wrong (status wrong, or ok with correct False) and the baseline's
              were not already wrong (a new point that is wrong counts too)  -> counts as a regression
  BROKE       baseline ok & correct, candidate failed (oom, compile_error, resources, unsupported, error)
              -> counts as a regression
  still wrong both sides wrong: reported, not counted
  skipped     either side's row is `skipped` (not run, e.g. over cpu_budget_s in the CPU interpreter): counted in
              the summary on its own, never a failure (not BROKE, "still failing" or "fixed")

Across GPUs (cross_gpu=true, or automatically when the two sides share no gpu_name)
  Per shape, not per config (block defaults differ per GPU, as in plots.cross_gpu): on each side every
  variant's fastest correct config per (variant, shape, dtype, timer) is compared with the other side's; the
  table shows both configs, candidate/baseline TFLOPS and both % of peak. Speed is never flagged and a
  failure such as oom on the other GPU is only reported; wrong gradients still count: WRONG when any of the
  candidate's configs of a shape is wrong and none of the baseline's was.

Model-step rows (bench_kind=model_step, runners.model_step: one training step of a small decoder)
  Join on their own key (runners.tables.step_join_key: the row's config_key, i.e. the model config, variant,
  compile_mode, agreement baseline and seed, less the timing knobs warmup and rep) and the GPU, never on a kernel
  row's. The same rule runs on their speed in steps/s, 1000 / ms (p20 and p80 likewise): SLOWER when the
  candidate's fastest step time is more than ``threshold`` slower than the baseline's slowest, as for a kernel's
  TFLOPS, which are an inverse time too. WRONG (the training-agreement gate) and BROKE count as for kernel rows.
  They are printed in a table of their own (step ms per side).

Host-cost rows (bench_kind=host_cost, runners.host_cost: host time of one eager forward + backward call, issue 44)
  The same as model-step rows: joined on their config_key (shape, dtype, variant, call path, seed; less warmup and
  rep) and the GPU, the rule on calls/s (1000 / ms), WRONG and BROKE as for kernel rows; a table of their own (host ms
  per side). CPU-interpreter rows are never speed-compared (timing_meaningful false).

Compiled-resources tables (runners.compiled_table, results/compiled/: no timings, one row per architecture, design,
config and kernel) are recognised by their columns and compared by runners/regression/compiled.py: new or more spills,
a kernel that no longer fits or compiles, and registers up by more than regs_margin=<n> (default 8) count; the
report adds an architecture x design view. baseline=<commit> results=results/compiled works as for timing rows.

Exit status: 1 when anything counts as a regression, 0 otherwise, 2 on bad arguments, unusable tables, or sides
that share no point (one line: "no point compared"; nothing compared is never "no regressions") (a file under either side that is not a result table is refused with one line naming it; any other failure
on the way is also 2, never 1: 1 always means a regression was found).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from runners import tables as T
from runners.regression.refs import is_commit_like, resolve_ref

PROG = "runners.regress"
DEFAULTS = {"baseline": None, "candidate": None, "results": None, "threshold": 0.05, "cross_gpu": "auto",
            "out": None, "regs_margin": 8}


def keep_columns() -> tuple:
    """The columns a comparison carries per side (the block fields come from the registry, read on first use)."""
    return ("config_key", "join_key", T.GPU, "variant", *T.SHAPE_COLUMNS, "dtype", *T.BLOCK_FIELDS, "status",
            "correct", "timing_meaningful", "tflops", "tflops_p20", "tflops_p80", "pct_peak", T.PEAK, "commit",
            "reason", "timer", *STEP_KEEP, *SPEED)


def point_columns() -> tuple:
    """The columns that name a point (taken from whichever side has it)."""
    return ("variant", *T.SHAPE_COLUMNS, "dtype", *T.BLOCK_FIELDS, T.STEP_KIND_COLUMN, "compile_mode", "call_path",
            *T.step_config_columns())


STEP_KEEP = (T.STEP_KIND_COLUMN, "compile_mode", "call_path", "model", "layers", "d_model", "ms", "ms_p20", "ms_p80")
SPEED = ("speed", "speed_p20", "speed_p80")  # what the rule compares, higher is faster: TFLOPS, or steps/s
SHAPE_KEY = ("variant", *T.SHAPE_COLUMNS, "dtype", "timer")  # cross-GPU: one comparison per shape and variant
COUNTED = ("SLOWER", "WRONG", "BROKE")


@dataclass
class Side:
    rows: pd.DataFrame
    description: str


@dataclass
class Comparison:
    """The joined table (one row per point, ``verdict`` and ``counted`` columns) and what it adds up to."""
    table: pd.DataFrame
    cross_gpu: bool
    threshold: float
    counts: dict = field(default_factory=dict)
    n_both: int = 0  # points present on both sides

    @property
    def regressed(self) -> bool:
        return bool(self.table["counted"].any()) if len(self.table) else False


# ---------------------------------------------------------------------------------------------------- sides
def newest_commit(rows: pd.DataFrame) -> str:
    """The commit whose newest row is the latest (rows without a timestamp count as oldest)."""
    stamps = rows.assign(_t=rows["_ts"].fillna(pd.Timestamp.min.tz_localize("UTC"))).groupby("commit")["_t"].max()
    return str(stamps.sort_values(kind="stable").index[-1])


def _sharing(other: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    """The rows of the commits that measured at least one of the baseline's points on one of its GPUs: a newer
    commit that measured something else (a probe, another study in the same folder) is not the candidate. When
    no commit shares a point, all of ``other`` (the comparison then says that no point was compared)."""
    def points(rows: pd.DataFrame) -> pd.Series:  # T.load gave every row its join_key
        return rows["join_key"] + "@" + rows[T.GPU].astype(str)
    shared = points(other).isin(set(points(base)))
    commits = set(other.loc[shared, "commit"])
    return other[other["commit"].isin(commits)] if commits else other


def resolve_sides(baseline: str | None, candidate: str | None, results: str | None) -> tuple[Side, Side]:
    if not baseline:
        raise T.UsageError(f"{PROG}: baseline=<results path or git commit> is required")
    if Path(baseline).exists():
        if not candidate:
            raise T.UsageError(f"{PROG}: candidate=<results path> is required when baseline is a path")
        base, cand = T.load(baseline, strict=True), T.load(candidate, strict=True)
        return Side(base, f"{baseline} ({_summary(base)})"), Side(cand, f"{candidate} ({_summary(cand)})")
    sha = baseline if is_commit_like(baseline) else resolve_ref(baseline)
    if sha is None:
        raise T.UsageError(f"{PROG}: baseline={baseline!r} is neither an existing path nor a git commit")
    source = results or candidate
    if not source:
        raise T.UsageError(f"{PROG}: baseline={baseline} is a commit: give results=<dir> (or candidate=<dir>) "
                           "holding rows of that commit")
    pool = T.load(source, strict=True)
    matched = pool[pool["commit"].str.lower().str.startswith(sha.lower())]
    commits = sorted(set(matched["commit"]))
    if not commits:
        present = ", ".join(sorted({c[:10] for c in pool["commit"] if c})) or "none"
        raise T.UsageError(f"{PROG}: no rows of commit {sha[:12]} under {source}; commits present: {present}")
    if len(commits) > 1:
        raise T.UsageError(f"{PROG}: commit prefix {sha} is ambiguous: {', '.join(c[:12] for c in commits)}")
    base_sha = commits[0]
    base = matched
    if results and candidate:
        other = T.load(candidate, strict=True)
        where = candidate
    else:
        other = pool[pool["commit"] != base_sha]
        where = source
    other = other[other["commit"] != base_sha]
    if other.empty:
        raise T.UsageError(f"{PROG}: no rows of any commit other than {base_sha[:12]} under {where}")
    cand_sha = newest_commit(_sharing(other, base))
    cand = other[other["commit"] == cand_sha]
    return (Side(base, f"commit {base_sha[:12]}{_dirty(base)} from {source} ({_summary(base)})"),
            Side(cand, f"newest commit {cand_sha[:12] or '(none)'}{_dirty(cand)} from {where} ({_summary(cand)})"))


def _dirty(rows: pd.DataFrame) -> str:
    return " [dirty tree]" if rows["dirty"].any() else ""


def _summary(rows: pd.DataFrame) -> str:
    gpus = ", ".join(sorted(rows[T.GPU].unique()))
    commits = sorted({c[:7] for c in rows["commit"] if c})
    commit = commits[0] if len(commits) == 1 else f"{len(commits)} commits"
    return f"{len(rows)} rows, {gpus}, {commit}"


# ----------------------------------------------------------------------------------------------------- rule
def with_speed(df: pd.DataFrame) -> pd.DataFrame:
    """``SPEED`` columns: a kernel row's TFLOPS (median, p20, p80), a model-step row's steps per second (1000 / ms
    of each). Both are inverse times, so one rule (and one ratio, >1 faster) serves both."""
    step = T.is_call_row(df)  # a model step, a host-cost call: calls per second
    out = {}
    for speed, tflops, ms in zip(SPEED, ("tflops", "tflops_p20", "tflops_p80"), ("ms", "ms_p20", "ms_p80")):
        per_step = 1000.0 / df[ms].astype(float).where(df[ms] > 0)
        out[speed] = df[tflops].astype(float).where(~step, per_step)
    return df.assign(**out)


def _ends(df: pd.DataFrame, suffix: str) -> tuple[pd.Series, pd.Series]:
    """(pessimistic, optimistic) speed of each point: min and max of p20, median, p80 (NaNs ignored)."""
    cols = df[[f"speed_p20{suffix}", f"speed{suffix}", f"speed_p80{suffix}"]].astype(float)
    return cols.min(axis=1, skipna=True), cols.max(axis=1, skipna=True)


def best_per_shape(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, shape, dtype, timer): the fastest correct config with meaningful timings, else a
    correct untimed one, else a wrong one, else a failed one. Adds ``shape_key``, ``n_configs`` (configs
    measured for that shape) and ``n_wrong`` (how many of them had wrong gradients)."""
    if df.empty:
        return df.assign(shape_key=pd.Series(dtype=object), n_configs=0, n_wrong=0)
    shape_key = T.row_keys(df, SHAPE_KEY).where(~T.is_call_row(df), df["join_key"])  # a whole call: its config
    df = df.assign(shape_key=shape_key, _wrong=T.is_wrong(df).astype(int))
    rank = np.select([T.is_result(df) & df["timing_meaningful"], T.is_result(df), df["_wrong"] > 0], [0, 1, 2], 3)
    df = df.assign(_rank=rank, _speed=df["speed"].fillna(-np.inf))
    groups = df.groupby("shape_key", sort=False)
    df = df.assign(n_configs=groups["shape_key"].transform("size"), n_wrong=groups["_wrong"].transform("sum"))
    best = df.sort_values(["_rank", "_speed"], ascending=[True, False], kind="stable")
    return best.drop_duplicates("shape_key").drop(columns=["_wrong", "_rank", "_speed"]).reset_index(drop=True)


def compare(base: pd.DataFrame, cand: pd.DataFrame, threshold: float = 0.05,
            cross_gpu: bool | None = None) -> Comparison:
    """Join two normalised tables and give every point a verdict; see the module docstring for the rule."""
    if not 0 <= threshold < 1:
        raise T.UsageError(f"{PROG}: threshold={threshold}: must be in [0, 1)")
    base, cand = with_speed(T.latest(base)), with_speed(T.latest(cand))
    if cross_gpu is None:
        cross_gpu = not (set(base[T.GPU]) & set(cand[T.GPU]))
    if cross_gpu:  # per shape: each side's best correct config (block defaults differ per GPU)
        base, cand = best_per_shape(base), best_per_shape(cand)
        on = ["shape_key"]
    else:
        base = base.assign(n_wrong=T.is_wrong(base).astype(int))
        cand = cand.assign(n_wrong=T.is_wrong(cand).astype(int))
        on = ["join_key", T.GPU]
    keep = [*keep_columns(), "n_wrong", *(["shape_key", "n_configs"] if cross_gpu else [])]
    b = base[keep].add_suffix("_b").rename(columns={f"{k}_b": k for k in on})
    c = cand[keep].add_suffix("_c").rename(columns={f"{k}_c": k for k in on})
    j = b.merge(c, on=on, how="outer", indicator=True)
    merged = {col: j[f"{col}_c"].where(j["_merge"] != "left_only", j[f"{col}_b"])
              for col in dict.fromkeys(point_columns()) if f"{col}_c" in j.columns}
    j = pd.concat([j.drop(columns=[c for c in merged if c in j.columns]), pd.DataFrame(merged, index=j.index)],
                  axis=1)  # one insert, not one per column (a fragmented frame warns)
    if not cross_gpu:
        j["gpu"] = j[T.GPU]
    else:
        j["gpu"] = j[f"{T.GPU}_b"].fillna("-").astype(str) + " → " + j[f"{T.GPU}_c"].fillna("-").astype(str)
    both = j["_merge"] == "both"
    res_b = both & (j["status_b"] == "ok") & j["correct_b"].astype(bool)
    res_c = both & (j["status_c"] == "ok") & j["correct_c"].astype(bool)
    has_c = j["_merge"] != "left_only"
    wrong_c = has_c & (j["n_wrong_c"].fillna(0) > 0)  # cross-GPU: any config of the shape
    wrong_b = both & (j["n_wrong_b"].fillna(0) > 0)
    timed = res_b & res_c & j["timing_meaningful_b"].astype(bool) & j["timing_meaningful_c"].astype(bool)
    lo_b, hi_b = _ends(j, "_b")
    lo_c, hi_c = _ends(j, "_c")
    j["ratio"] = np.where(res_b & res_c, j["speed_c"] / j["speed_b"], np.nan)
    no_speed = timed & (j["speed_b"].isna() | j["speed_c"].isna())  # ok and correct, but nothing to compare
    slower = timed & (hi_c < lo_b * (1 - threshold))
    faster = timed & (lo_c > hi_b * (1 + threshold))
    j = j.copy()  # one block of columns again after the inserts above
    verdict = pd.Series("", index=j.index, dtype=object)
    verdict[j["_merge"] == "left_only"] = "missing in candidate"
    verdict[(j["_merge"] == "right_only")] = "new"
    verdict[both & ~res_b & ~res_c] = "still failing"
    verdict[both & ~res_b & res_c] = "fixed"
    verdict[res_b & res_c & ~timed] = "untimed"
    if cross_gpu:  # different hardware: speed is information, a failure there is not a code regression
        verdict[timed] = "compared"
        verdict[res_b & both & ~res_c & ~wrong_c] = "fails on candidate GPU"
    else:
        verdict[timed] = "≈"
        verdict[timed & (j["ratio"] < 1 - threshold) & ~slower] = "slower (within noise)"
        verdict[timed & (j["ratio"] > 1 + threshold) & ~faster] = "faster (within noise)"
        verdict[faster] = "FASTER"
        verdict[slower] = "SLOWER"
        verdict[res_b & both & ~res_c & ~wrong_c] = "BROKE"
    skipped = both & ((j["status_b"] == "skipped") | (j["status_c"] == "skipped"))  # not run: never a failure
    verdict[skipped] = "skipped"
    verdict[no_speed] = "no tflops"
    verdict[wrong_c & wrong_b] = "still wrong"
    verdict[wrong_c & ~wrong_b] = "WRONG"
    j["verdict"] = verdict
    j["counted"] = j["verdict"].isin(COUNTED)
    counts = j["verdict"].value_counts().to_dict()
    order = {"WRONG": 0, "BROKE": 1, "SLOWER": 2, "still wrong": 3, "fails on candidate GPU": 4}
    j["_order"] = j["verdict"].map(order).fillna(9)
    j = j.sort_values(["_order", "ratio", "variant"], na_position="last", kind="stable").drop(columns="_order")
    return Comparison(j.reset_index(drop=True), bool(cross_gpu), threshold, counts, int(both.sum()))


# ---------------------------------------------------------------------------------------------------- output
def _tflops_text(med, p20, p80) -> str:
    if pd.isna(med):
        return "-"
    lo, hi = np.nanmin([p20, med, p80]), np.nanmax([p20, med, p80])
    return f"{_num(med)} [{_num(lo)}–{_num(hi)}]"


def _num(x: float) -> str:
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"


def _status_text(row, side: str) -> str:
    status = row[f"status_{side}"]
    if pd.isna(status):
        return "absent"
    if status == "ok" and not bool(row[f"correct_{side}"]):
        return "ok but incorrect"
    return str(status)


def _shown(cmp: Comparison, only_notable: bool, kind: str | None) -> pd.DataFrame:
    """The compared points of one kind (kind None: kernel rows; T.STEP_KIND, T.HOST_KIND: that bench kind's) that a
    table lists."""
    t = cmp.table[~T.is_call_row(cmp.table) if kind is None else cmp.table[T.STEP_KIND_COLUMN].eq(kind)]
    t = t[~t["verdict"].isin(("missing in candidate", "new", "still failing", "skipped"))]
    if only_notable:
        t = t[~t["verdict"].isin(("≈", "compared", "untimed", "faster (within noise)"))]
    return t


def display_table(cmp: Comparison, only_notable: bool = False) -> pd.DataFrame:
    """The human-readable table of the kernel points: verdict, point, GPU, both sides' TFLOPS [p20–p80] or status,
    ratio. (Model-step points: ``step_display_table``.)"""
    t = _shown(cmp, only_notable, None)
    rows = []
    for _, r in t.iterrows():
        base = _tflops_text(r["tflops_b"], r["tflops_p20_b"], r["tflops_p80_b"]) \
            if r["status_b"] == "ok" and bool(r["correct_b"]) else _status_text(r, "b")
        cand = _tflops_text(r["tflops_c"], r["tflops_p20_c"], r["tflops_p80_c"]) \
            if r["status_c"] == "ok" and bool(r["correct_c"]) else _status_text(r, "c")
        blocks = T.blocks_text(r) or "-"
        if cmp.cross_gpu:  # each side's own best config
            base_blocks, cand_blocks = (T.blocks_text({f: r[f"{f}{s}"] for f in T.BLOCK_FIELDS}) or "-"
                                        for s in ("_b", "_c"))
            blocks = base_blocks if base_blocks == cand_blocks else f"{base_blocks} → {cand_blocks}"
        out = {"verdict": r["verdict"], "variant": r["variant"], "shape": T.shape_text(r), "dtype": r["dtype"],
               "blocks": blocks, "gpu": r["gpu"], "baseline TFLOPS": base,
               "candidate TFLOPS": cand, "cand/base": f"{r['ratio']:.3f}" if pd.notna(r["ratio"]) else "-"}
        if cmp.cross_gpu:
            out["% peak base"] = _pct(r, "_b")
            out["% peak cand"] = _pct(r, "_c")
        rows.append(out)
    return pd.DataFrame(rows)


def step_display_table(cmp: Comparison, only_notable: bool = False) -> pd.DataFrame:
    """The model-step points: verdict, design, compile mode, model config, GPU, both sides' step ms [p20–p80] or
    status, and the speed ratio baseline ms / candidate ms (<1: the candidate is slower)."""
    rows = []
    for _, r in _shown(cmp, only_notable, T.STEP_KIND).iterrows():
        sides = [_tflops_text(r[f"ms_{s}"], r[f"ms_p20_{s}"], r[f"ms_p80_{s}"])
                 if r[f"status_{s}"] == "ok" and bool(r[f"correct_{s}"]) else _status_text(r, s) for s in "bc"]
        rows.append({"verdict": r["verdict"], "variant": r["variant"], "mode": r["compile_mode"],
                     "model": T.step_text(r), "gpu": r["gpu"], "baseline step ms": sides[0],
                     "candidate step ms": sides[1],
                     "base ms/cand ms": f"{r['ratio']:.3f}" if pd.notna(r["ratio"]) else "-"})
    return pd.DataFrame(rows)


def host_display_table(cmp: Comparison, only_notable: bool = False) -> pd.DataFrame:
    """The host-cost points (runners.host_cost): verdict, design, call path, shape, dtype, GPU, both sides' host ms
    per eager forward + backward call [p20–p80] or status, and the ratio baseline ms / candidate ms."""
    rows = []
    for _, r in _shown(cmp, only_notable, T.HOST_KIND).iterrows():
        sides = [_tflops_text(r[f"ms_{s}"], r[f"ms_p20_{s}"], r[f"ms_p80_{s}"])
                 if r[f"status_{s}"] == "ok" and bool(r[f"correct_{s}"]) else _status_text(r, s) for s in "bc"]
        rows.append({"verdict": r["verdict"], "variant": r["variant"], "path": r["call_path"],
                     "shape": T.shape_text(r), "dtype": r["dtype"], "gpu": r["gpu"], "baseline host ms": sides[0],
                     "candidate host ms": sides[1],
                     "base ms/cand ms": f"{r['ratio']:.3f}" if pd.notna(r["ratio"]) else "-"})
    return pd.DataFrame(rows)


def _pct(r, suffix: str) -> str:
    pct = r[f"pct_peak{suffix}"]
    if pd.isna(pct) and pd.notna(r[f"{T.PEAK}{suffix}"]) and pd.notna(r[f"tflops{suffix}"]):
        pct = 100 * r[f"tflops{suffix}"] / r[f"{T.PEAK}{suffix}"]
    return f"{pct:.1f}%" if pd.notna(pct) else "-"


def summary_lines(cmp: Comparison) -> list[str]:
    c = cmp.counts
    steps, hosts = int(T.is_model_step(cmp.table).sum()), int(T.is_host_cost(cmp.table).sum())
    calls = [f"{n} {what} point(s)" for n, what in ((steps, "model-step"), (hosts, "host-cost")) if n]
    parts = [f"{cmp.n_both} point(s) in both tables" + (f" ({', '.join(calls)} in either)" if calls else "")]
    for key in ("SLOWER", "WRONG", "BROKE", "still wrong", "FASTER", "slower (within noise)",
                "faster (within noise)", "compared", "fails on candidate GPU", "fixed", "untimed", "no tflops",
                "still failing", "skipped", "missing in candidate", "new"):
        if c.get(key):
            parts.append(f"{c[key]} {key}")
    lines = [", ".join(parts)]
    if cmp.cross_gpu:
        lines.append("cross-GPU comparison: speed is not flagged; only wrong gradients count")
    lines.append(f"REGRESSED: {int(cmp.table['counted'].sum())} point(s)" if cmp.regressed else "no regressions")
    return lines


def rule_text(threshold: float, cross_gpu: bool, steps: bool = False) -> str:
    """The rule in one line; ``steps``: the tables hold whole-call rows (model steps, host-cost calls: their speed is
    calls/s)."""
    step_note = "; model-step rows (steps/s) and host-cost rows (calls/s): the same on 1000 / ms" if steps else ""
    if cross_gpu:
        return ("rule: cross-GPU — per shape, each side's fastest correct config; ratios reported, speed "
                "never flagged; wrong gradients always count" + step_note)
    return (f"rule: SLOWER when candidate's max(p20,p50,p80) TFLOPS < baseline's min(p20,p50,p80) × "
            f"{1 - threshold:g} (threshold {threshold:g}); WRONG / BROKE always count" + step_note)


def has_steps(cmp: Comparison) -> bool:
    """Whether the comparison holds whole-call rows (model steps, host-cost calls)."""
    return bool(T.is_call_row(cmp.table).any())


def markdown(cmp: Comparison, base: Side | None = None, cand: Side | None = None) -> str:
    lines = []
    if base is not None and cand is not None:
        lines += [f"- baseline: {base.description}", f"- candidate: {cand.description}"]
    lines += [f"- {rule_text(cmp.threshold, cmp.cross_gpu, has_steps(cmp))}", *[f"- {s}" for s in summary_lines(cmp)],
              ""]
    text = "\n".join(lines) + "\n"
    kernels, steps, hosts = display_table(cmp), step_display_table(cmp), host_display_table(cmp)
    if len(kernels) or not (len(steps) or len(hosts)):
        text += T.markdown_table(kernels)
    if len(steps):
        text += "\n" + STEP_HEADING + "\n\n" + T.markdown_table(steps)
    if len(hosts):
        text += "\n" + HOST_HEADING + "\n\n" + T.markdown_table(hosts)
    return text


def nothing_compared(base: Side, cand: Side, cross_gpu: bool) -> str:
    """The one line of a run whose sides share no point (exit 2: nothing compared, as the runner's 2 is nothing
    measured)."""
    on = "config_key (cross-GPU)" if cross_gpu else "config_key and GPU"
    return (f"{PROG}: no point compared: baseline {base.description} and candidate {cand.description} share no "
            f"point (joined on {on}); pick a baseline measured on the candidate's shapes")


STEP_HEADING = "Model-step points (training step time, ms [p20–p80]; lower is faster):"
HOST_HEADING = "Host-cost points (host time of one eager forward + backward call, ms [p20–p80]; lower is faster):"


def _compiled_tables(args: dict) -> bool:
    """Whether the sides are compiled-resources tables (runners.compiled_table) rather than timing rows."""
    from runners.regression.compiled import is_compiled_table
    paths = [p for p in (args["baseline"], args["results"] or args["candidate"]) if p and Path(p).exists()]
    return bool(paths) and is_compiled_table(paths[0])


@T.cli
def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except T.UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - an uncaught error would exit 1, which means "regression found"
        text = " ".join(str(exc).split())[:300]
        raise T.UsageError(f"{PROG}: cannot compare these tables: {type(exc).__name__}: {text}") from None


def _main(argv: list[str] | None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    if _compiled_tables(args):  # compiled-resources tables (results/compiled/): their own rule
        from runners.regression import compiled as regress_compiled
        return regress_compiled.run(args)
    mode = str(args["cross_gpu"]).strip().lower()
    if mode not in ("auto", "true", "false", "1", "0", "yes", "no"):
        raise T.UsageError(f"{PROG}: cross_gpu={args['cross_gpu']!r}: expected auto, true or false")
    cross = None if mode == "auto" else mode in ("true", "1", "yes")
    base, cand = resolve_sides(args["baseline"], args["candidate"], args["results"])
    cmp = compare(base.rows, cand.rows, args["threshold"], cross)
    if cmp.n_both == 0:  # nothing compared is no evidence of "no regressions"
        raise T.UsageError(nothing_compared(base, cand, cmp.cross_gpu))
    print(f"baseline:  {base.description}")
    print(f"candidate: {cand.description}")
    print(rule_text(cmp.threshold, cmp.cross_gpu, has_steps(cmp)))
    for heading, table in (("", display_table(cmp)), (STEP_HEADING, step_display_table(cmp)),
                           (HOST_HEADING, host_display_table(cmp))):
        if len(table):
            if heading:
                print(heading)
            with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 250,
                                   "display.max_colwidth", 60):
                print(table.to_string(index=False))
    for line in summary_lines(cmp):
        print(line)
    if args["out"]:
        out = Path(args["out"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("# Regression check\n\n" + markdown(cmp, base, cand))
        print(f"wrote {out}")
    return 1 if cmp.regressed else 0

