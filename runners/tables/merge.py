"""Merge result rows from many jobs and machines into one table: no row lost, none duplicated.

    python -m runners.merge results/ /mnt/cluster/results node7-results.parquet out=results/merged.parquet
    python -m runners.merge results/ out=merged/          # a directory: writes merged/merged.parquet
    python -m runners.merge results/ out=m.parquet strict=false   # skip (and list) files that are not result tables
    python -m runners.merge runs/ out=m.parquet remeasured=keep   # repeated runs of one point (noise studies): all kept

Every input (a directory, searched recursively, or a parquet file) is read with `runners.tables.results.load`, and
the rows are de-duplicated with `runners.tables.results.dedupe`: one row per (config_key, gpu_name, commit), the
newest by timestamp. A row is a duplicate when that key was seen before: either an exact copy (the same
measurement reached twice, e.g. a folder copied from another machine: same timestamp) or a re-measurement
(`resume=false`, or two machines with the same GPU model at one commit: the newest is kept). The output is
checked before it is written: every key of the input is in it exactly once. With `remeasured=keep` only exact copies
are dropped (one row per key and timestamp): every re-measurement stays, each with its own `sweep_id`, for a study
of repeated runs (issue 44's host cost, the model step's modes in alternating order). The out file itself is never
read as an input. `runners.regress` and the plots read the merged file like any results folder:

    python -m runners.regress baseline=<commit> results=results/merged.parquet
    python -m plots.compare results=results/merged.parquet

A file that is not a result table (truncated, another format renamed .parquet, empty, unreadable, a foreign
table missing columns such as `status` or `config_key`) stops the merge by default: one line naming it, exit 2, nothing
written. With `strict=false` such files are skipped, each named on stderr, and the report line counts them:
the merged table never loses rows silently. A column whose type clashes between files (int64 in one, string in
another) is the same: one line naming the column, the types and the files, exit 2; with `strict=false` the clashing
files' column is cast to the type most files have, one `coerced column ...` line each, and a file whose values do
not convert is skipped.

Exit status: 0 when written, 2 on bad arguments, a bad input file or clashing column type (strict) or no rows.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd

from runners.tables import results

PROG = "runners.merge"
DEFAULT_NAME = "merged.parquet"


class UsageError(Exception):
    pass


def parse(argv: list[str]) -> tuple[list[Path], Path, bool, bool]:
    """(inputs, out file, strict, keep re-measurements)."""
    inputs, out, strict, keep = [], None, True, False
    for token in argv:
        if token in ("-h", "--help", "help"):
            print(__doc__)
            raise SystemExit(0)
        if token.startswith(("out=", "--out=")):
            out = token.split("=", 1)[1]
        elif token.startswith(("strict=", "--strict=")):
            value = token.split("=", 1)[1].strip().lower()
            if value not in ("true", "false", "1", "0", "yes", "no"):
                raise UsageError(f"strict={value!r}: expected true or false")
            strict = value in ("true", "1", "yes")
        elif token.startswith(("remeasured=", "--remeasured=")):
            value = token.split("=", 1)[1].strip().lower()
            if value not in ("keep", "newest"):
                raise UsageError(f"remeasured={value!r}: expected keep or newest")
            keep = value == "keep"
        else:
            inputs.append(Path(token))
    if not inputs:
        raise UsageError("no inputs: give result folders or parquet files, and out=<file.parquet or folder>")
    if not out:
        raise UsageError("out=<file.parquet or folder> is required")
    for p in inputs:
        if not p.exists():
            raise UsageError(f"no results at {p}")
    out_path = Path(out)
    if out_path.suffix != ".parquet" or out_path.is_dir():
        out_path = out_path / DEFAULT_NAME
    return inputs, out_path, strict, keep


def input_files(inputs: list[Path], out: Path) -> list[Path]:
    """Every parquet file of the inputs, each once, the output file excluded."""
    files = results.parquet_files(inputs)
    skip = out.resolve()
    unique: dict = {}
    for f in files:
        unique.setdefault(f.resolve(), f)  # the path as found names the file in messages (a link: the link)
    return [f for resolved, f in unique.items() if resolved != skip]


def merge(df: pd.DataFrame, keep_remeasured: bool = False) -> tuple[pd.DataFrame, dict]:
    """(the de-duplicated table, counts): rows_in, rows_out, duplicates, exact_copies, remeasured, keys.
    keep_remeasured: drop exact copies only (the same key and timestamp); `remeasured` then counts the rows kept
    beside an earlier measurement of their key."""
    missing = [c for c in results.DEDUPE_KEY if c not in df.columns]
    if missing:
        raise UsageError(f"rows without the key column(s) {', '.join(missing)}: not result rows of runners.sweep")
    key = list(results.DEDUPE_KEY)
    if keep_remeasured and "timestamp" not in df.columns:
        raise UsageError("remeasured=keep needs the rows' timestamp column (it tells copies from re-measurements)")
    exact = 0
    if "timestamp" in df.columns:
        copies = df[key + ["timestamp"]].astype(str).duplicated()
        exact = int(copies.sum())
    if keep_remeasured:
        merged = df[~copies].sort_values("timestamp", kind="stable").reset_index(drop=True)
    else:
        merged = results.dedupe(df)
    seen, kept = set(keys_of(df, key)), keys_of(merged, key)
    if set(kept) != seen or (not keep_remeasured and len(kept) != len(seen)):  # checked before anything is written
        raise AssertionError("the merge lost or duplicated a (config_key, gpu_name, commit)")
    duplicates = len(df) - len(merged)
    remeasured = len(merged) - len(seen) if keep_remeasured else duplicates - exact
    counts = {"rows_in": len(df), "rows_out": len(merged), "duplicates": duplicates, "exact_copies": exact,
              "remeasured": remeasured, "keys": len(seen), "kept_remeasured": keep_remeasured}
    return merged, counts


def keys_of(table: pd.DataFrame, key: list[str]) -> list[tuple]:
    return list(table[key].astype(str).itertuples(index=False, name=None))


def write(df: pd.DataFrame, out: Path) -> Path:
    """Atomically (a temporary file renamed into place); replaces an older merged file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def read(files: list[Path], strict: bool) -> tuple[pd.DataFrame, list[str], list[str]]:
    """(rows of the readable files, one line per file that is not a result table, one line per column coerced);
    strict: UsageError naming the first bad file (and how many more) or clashing column type."""
    try:
        return results.read_files(files, strict)
    except results.TableError as exc:
        raise UsageError(f"{exc}; nothing written (strict=false skips bad files and coerces clashing "
                         "types)") from None


def report(counts: dict, merged: pd.DataFrame, files: int, skipped: int = 0) -> list[str]:
    skip = f" ({skipped} not result tables, skipped: their rows are NOT in the output)" if skipped else ""
    what = (f"{counts['exact_copies']} exact copies dropped; {counts['remeasured']} re-measurements kept beside "
            f"the first of their (config_key, gpu_name, commit): remeasured=keep)" if counts["kept_remeasured"] else
            f"{counts['duplicates']} duplicates dropped: {counts['exact_copies']} exact copies, "
            f"{counts['remeasured']} re-measured, newest kept); each (config_key, gpu_name, commit) once")
    lines = [f"{files} files{skip}, {counts['rows_in']} rows in -> {counts['rows_out']} rows out ({what}"]
    by = [c for c in ("gpu_name", "hostname") if c in merged.columns]
    if by:
        for values, n in merged.groupby(by, dropna=False).size().items():
            values = values if isinstance(values, tuple) else (values,)
            lines.append("  " + ", ".join(f"{c}={v}" for c, v in zip(by, values)) + f": {n} rows")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        inputs, out, strict, keep = parse(argv)
        files = input_files(inputs, out)
        df, problems, notes = read(files, strict)
        for problem in problems:
            print(f"{PROG}: warning: skipped {problem}", file=sys.stderr)
        for note in notes:
            print(f"{PROG}: warning: {note}", file=sys.stderr)
        if df.empty:
            raise UsageError(f"no result rows under {', '.join(map(str, inputs))}")
        merged, counts = merge(df, keep)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    for line in report(counts, merged, len(files), len(problems)):
        print(line)
    print(f"wrote {write(merged, out)}")
    return 0

