"""runners.regress for compiled-resources tables (runners.compiled_table, results/compiled/): two commits' kernels
compared per (arch, design, head dim, causal, dtype, heads, kernel), like timing rows are per config.

Rows join on that key (a kernel launched twice in one backward: by its order), not on the blocks, so a change of
default blocks is compared too (both sides' blocks are shown where they differ). Verdicts:
  SPILLS      both compile, the candidate stores more spill bytes than the baseline (new spills or more)  counts
  BROKE       the baseline compiled and fit, the candidate does not (OutOfResources: shared memory, threads,
              no program per SM; a compile error; unsupported)                                             counts
  REGS UP     both fit, registers per thread up by more than `regs_margin` (default 8)                    counts
  fixed, fewer spills, regs down, ≈, still failing, missing in candidate, new: reported, never counted.
The report adds an architecture x design view: per cell the counted verdicts, else `ok (k/n fit)`: of the candidate's
n kernels there, k fit.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from runners import tables as T
from runners.regression.refs import is_commit_like, resolve_ref

KEY = ["arch", "variant", "head_dim", "causal", "dtype", "heads", "kv_heads", "kernel", "launch"]
COUNTED = ("SPILLS", "BROKE", "REGS UP")
REQUIRED = {"arch", "variant", "kernel", "n_regs", "spill_store_bytes", "smem_bytes", "status"}
REGS_MARGIN = 8


def is_compiled_table(path: str | Path) -> bool:
    """Whether `path` (a .csv / .parquet file, or a folder of them) holds compiled-resources tables."""
    files = _files(Path(path))
    return bool(files) and all(REQUIRED <= _columns(f) for f in files)


def _columns(path: Path) -> set:
    """The file's column names; none when it cannot be read (the timing loader then names it in its own error)."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq
            return set(pq.read_schema(path).names)
        return set(pd.read_csv(path, nrows=0).columns)
    except Exception:  # noqa: BLE001 - detection only: never the reason a comparison fails
        return set()


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if path.suffix in (".csv", ".parquet") else []
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix in (".csv", ".parquet"))
    return []


def _read(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def load(path: str | Path) -> pd.DataFrame:
    """Every compiled row under `path`, with `launch` (the order of a kernel name within its config)."""
    files = _files(Path(path))
    if not files:
        raise T.UsageError(f"runners.regress: no compiled-resources table (.csv / .parquet) under {path}")
    frame = pd.concat([_read(f) for f in files], ignore_index=True)
    if "commit" not in frame:
        frame["commit"] = ""
    frame["commit"] = frame["commit"].fillna("").astype(str)
    config = ["commit", *[k for k in KEY if k not in ("kernel", "launch")]]
    frame["launch"] = frame.groupby([*config, "kernel"], dropna=False).cumcount()
    return frame


def select_commit(rows: pd.DataFrame, sha: str) -> pd.DataFrame:
    chosen = rows[rows["commit"].str.lower().str.startswith(sha.lower())]
    commits = sorted(set(chosen["commit"]))
    if len(commits) != 1:
        present = ", ".join(sorted({c[:10] for c in rows["commit"] if c})) or "none"
        raise T.UsageError(f"runners.regress: commit {sha} matches {len(commits)} commits in the compiled tables; "
                           f"present: {present}")
    return chosen


def newest_other(rows: pd.DataFrame, sha: str) -> pd.DataFrame:
    other = rows[~rows["commit"].str.lower().str.startswith(sha.lower())]
    if other.empty:
        raise T.UsageError(f"runners.regress: no compiled rows of a commit other than {sha[:12]}")
    stamps = pd.to_datetime(other.get("timestamp"), utc=True, errors="coerce") if "timestamp" in other else None
    newest = other.assign(_t=stamps).sort_values("_t", kind="stable")["commit"].iloc[-1] if stamps is not None \
        else other["commit"].iloc[-1]
    return other[other["commit"] == newest]


def _fits(status: pd.Series) -> pd.Series:
    return status.fillna("absent") == "ok"


def compare(base: pd.DataFrame, cand: pd.DataFrame, regs_margin: int = REGS_MARGIN) -> pd.DataFrame:
    """The joined table: KEY, both sides' blocks / n_regs / spills / smem / status (suffix _b, _c), `verdict`,
    `counted`."""
    keep = ["blocks", "n_regs", "spill_store_bytes", "smem_bytes", "programs_per_sm", "status"]
    b = base[KEY + keep].add_suffix("_b").rename(columns={f"{k}_b": k for k in KEY})
    c = cand[KEY + keep].add_suffix("_c").rename(columns={f"{k}_c": k for k in KEY})
    j = b.merge(c, on=KEY, how="outer", indicator=True)
    both = j["_merge"] == "both"
    ok_b, ok_c = both & _fits(j["status_b"]), both & _fits(j["status_c"])
    spills_b, spills_c = j["spill_store_bytes_b"].fillna(0), j["spill_store_bytes_c"].fillna(0)
    regs_delta = j["n_regs_c"] - j["n_regs_b"]
    compiled = both & j["n_regs_b"].notna() & j["n_regs_c"].notna()
    verdict = pd.Series("≈", index=j.index, dtype=object)
    verdict[j["_merge"] == "left_only"] = "missing in candidate"
    verdict[j["_merge"] == "right_only"] = "new"
    verdict[both & ~ok_b & ~ok_c] = "still failing"
    verdict[both & ~ok_b & ok_c] = "fixed"
    verdict[ok_b & ok_c & (regs_delta < -regs_margin)] = "regs down"
    verdict[ok_b & ok_c & (spills_c < spills_b)] = "fewer spills"
    verdict[ok_b & ok_c & (regs_delta > regs_margin)] = "REGS UP"
    verdict[compiled & ok_b & (spills_c > spills_b)] = "SPILLS"
    verdict[ok_b & both & ~ok_c] = "BROKE"
    j["verdict"] = verdict
    j["counted"] = j["verdict"].isin(COUNTED)
    order = {"BROKE": 0, "SPILLS": 1, "REGS UP": 2}
    j = j.assign(_order=j["verdict"].map(order).fillna(9)).sort_values(["_order", *KEY], kind="stable")
    return j.drop(columns=["_order", "_merge"]).reset_index(drop=True)


def _side_text(r, side: str) -> str:
    status = r[f"status_{side}"]
    if pd.isna(status):
        return "absent"
    if pd.isna(r[f"n_regs_{side}"]):
        return str(status)[:70]
    text = f"{int(r[f'n_regs_{side}'])} regs, {int(r[f'spill_store_bytes_{side}'] or 0)} B spills, " \
           f"{r[f'smem_bytes_{side}'] / 1024:.1f} KB"
    return text if status == "ok" else f"{text}: {str(status)[:60]}"


def display_table(j: pd.DataFrame) -> pd.DataFrame:
    """The notable rows (not ≈, missing, new or still failing: those are counted in the summary), one line each."""
    shown = j[~j["verdict"].isin(("≈", "missing in candidate", "new", "still failing"))]
    rows = []
    for _, r in shown.iterrows():
        blocks = "" if r["blocks_b"] == r["blocks_c"] or pd.isna(r["blocks_b"]) else " (blocks changed)"
        rows.append({"verdict": r["verdict"], "arch": r["arch"], "variant": r["variant"],
                     "config": f"D{r['head_dim']} {r['dtype']}{' causal' if _true(r['causal']) else ''}",
                     "kernel": r["kernel"] + (f"#{int(r['launch']) + 1}" if r["launch"] else ""),
                     "baseline": _side_text(r, "b"), "candidate": _side_text(r, "c") + blocks})
    return pd.DataFrame(rows)


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1")


def arch_design_view(j: pd.DataFrame) -> pd.DataFrame:
    """Architecture x design: per cell the counted verdicts ('SPILLS 2, BROKE 1'), else 'ok (fit/n fit)' of the
    candidate's n kernels, 'unsupported' where every candidate row of the cell is, '-' where the cell has no rows."""
    from runners.compile.arch_limits import ARCHS
    order = list(ARCHS)
    archs = sorted(dict.fromkeys(j["arch"]), key=lambda a: (order.index(a) if a in order else len(order), a))
    designs = list(dict.fromkeys(j["variant"]))
    view = pd.DataFrame("-", index=archs, columns=designs, dtype=object)
    for (arch, variant), cell in j.groupby(["arch", "variant"], sort=False):
        counted = cell[cell["counted"]]["verdict"].value_counts()
        if len(counted):
            view.loc[arch, variant] = ", ".join(f"{v} {n}" for v, n in counted.items())
        elif cell["status_c"].fillna("").str.startswith("unsupported").all():
            view.loc[arch, variant] = "unsupported"
        else:
            fit = int((cell["status_c"] == "ok").sum())
            view.loc[arch, variant] = f"ok ({fit}/{int(cell['status_c'].notna().sum())} fit)"
    return view.rename_axis("arch").reset_index()


def summary_lines(j: pd.DataFrame, regs_margin: int) -> list[str]:
    counts = j["verdict"].value_counts()
    parts = [f"{int((j['status_b'].notna() & j['status_c'].notna()).sum())} kernel(s) in both tables"]
    parts += [f"{counts[k]} {k}" for k in (*COUNTED, "fixed", "fewer spills", "regs down", "still failing",
                                            "missing in candidate", "new") if counts.get(k)]
    counted = int(j["counted"].sum())
    return [", ".join(parts),
            f"rule: SPILLS (more spill stores), BROKE (no longer fits / compiles), REGS UP (> {regs_margin} registers)",
            f"REGRESSED: {counted} kernel(s)" if counted else "no regressions"]


def report(j: pd.DataFrame, regs_margin: int, base_text: str, cand_text: str) -> str:
    """The Markdown report: both sides, the rule and summary, the architecture x design view, the notable rows."""
    lines = [f"- baseline: {base_text}", f"- candidate: {cand_text}", *[f"- {s}" for s in summary_lines(j, regs_margin)],
             "", "## Architecture x design", "", T.markdown_table(arch_design_view(j)), "## Kernels", "",
             T.markdown_table(display_table(j))]
    return "\n".join(lines)


def describe(rows: pd.DataFrame, where: str) -> str:
    commits = sorted({c[:7] for c in rows["commit"] if c}) or ["no commit"]
    return f"{where} ({len(rows)} kernels, {', '.join(commits)}, archs {', '.join(dict.fromkeys(rows['arch']))})"


def run(args: dict, out=print) -> int:
    """runners.regress's compiled mode (its parsed key=value arguments): 1 when anything counts, else 0; a UsageError
    (exit 2) when the tables share no kernel."""
    baseline, candidate, results = args["baseline"], args["candidate"], args["results"]
    margin = int(args["regs_margin"])
    if Path(baseline).exists():
        if not candidate:
            raise T.UsageError("runners.regress: candidate=<compiled table> is required when baseline is a path")
        base, cand = load(baseline), load(candidate)
        base_text, cand_text = describe(base, baseline), describe(cand, candidate)
    else:
        sha = baseline if is_commit_like(baseline) else resolve_ref(baseline)
        if sha is None:
            raise T.UsageError(f"runners.regress: baseline={baseline!r} is neither an existing path nor a git commit")
        source = results or candidate
        pool = load(source)
        base = select_commit(pool, sha)
        cand = newest_other(load(candidate) if results and candidate else pool, base["commit"].iloc[0])
        base_text, cand_text = describe(base, f"commit {baseline} from {source}"), describe(cand, "newest other commit")
    j = compare(base, cand, margin)
    if not (j["status_b"].notna() & j["status_c"].notna()).any():  # nothing compared is not "no regressions"
        raise T.UsageError(f"runners.regress: no kernel compared: baseline {base_text} and candidate {cand_text} "
                           "share no (arch, design, config, kernel)")
    out(f"baseline:  {base_text}")
    out(f"candidate: {cand_text}")
    with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 250,
                           "display.max_colwidth", 80):
        out(arch_design_view(j).to_string(index=False))
        table = display_table(j)
        if len(table):
            out(table.to_string(index=False))
    for line in summary_lines(j, margin):
        out(line)
    if args.get("out"):
        path = Path(args["out"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# Regression check: compiled resources\n\n" + report(j, margin, base_text, cand_text))
        out(f"wrote {path}")
    return 1 if j["counted"].any() else 0
