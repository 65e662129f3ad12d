"""Reading result tables: every row under a path (through runners.tables.results.load, the one way to read
them), normalised: missing columns, flags, text columns, derived columns and join keys."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from runners.tables.args import UsageError
from runners.tables.cells import as_bool, row_keys, text
from runners.tables.columns import (BLOCK_FIELDS, ENV_COLUMNS, EXPLAIN_COLUMNS, EXPLAIN_TEXT_COLUMNS, GPU,
                                     MEASURE_COLUMNS, PEAK, SHAPE_COLUMNS, STEP_KIND_COLUMN, STEP_MEASURE_COLUMNS,
                                     TIMED_COLUMN, step_config_columns)
from runners.tables.keys import fill_block_defaults, join_keys
from runners.tables.results import TableError
from runners.tables.results import load as load_rows
from runners.tables.select import is_model_step


def load(path: str | Path, strict: bool = False, skipped: list | None = None) -> pd.DataFrame:
    """Every result row under ``path`` (a parquet file, or a directory searched recursively), normalised.

    A file that is not a result table (corrupt, foreign, empty, unreadable) is skipped with one
    ``warning: skipped <file>: <why>`` line on stderr, or, with ``strict``, is a UsageError naming it (exit 2).
    ``skipped``: a list that also receives each skipped file as ``'<file>: <why>'`` (a report names them).
    Reads with ``runners.tables.results.load``.
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise UsageError(f"results path {str(path)!r} does not exist")

    def warn(line: str) -> None:
        print(line, file=sys.stderr)
        if skipped is not None and line.startswith("warning: skipped "):  # not "warning: coerced ..."
            skipped.append(line.removeprefix("warning: skipped "))

    try:
        df = load_rows(path, strict=strict, warn=warn)
    except TableError as err:  # one line naming the file
        raise UsageError(str(err)) from None
    if df is None or len(df) == 0:
        unread = f" ({len(skipped)} unreadable file(s))" if skipped else ""
        raise UsageError(f"no result rows under {str(path)!r}{unread}")
    return normalize(df)


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """Missing columns added as NaN, flags as real booleans, text columns as str ('' when missing), plus the
    derived columns ``gpu_label`` (GPU), ``dtype_peak_tflops`` (PEAK) and ``_ts`` (parsed timestamp)."""
    df = df.reset_index(drop=True)  # tables concatenated from many files may repeat index labels
    block_cols = tuple(BLOCK_FIELDS)
    step_cols = step_config_columns()
    expected = ("variant", "dtype", "layout", "status", "reason", "config_key", "blocks_json", "timer",
                *SHAPE_COLUMNS, *block_cols, *ENV_COLUMNS, *MEASURE_COLUMNS, *EXPLAIN_COLUMNS,
                *EXPLAIN_TEXT_COLUMNS, "correct", "timing_meaningful", "bench_kind", "compile_mode", "call_path",
                *step_cols,
                *STEP_MEASURE_COLUMNS)
    missing = [col for col in dict.fromkeys(expected) if col not in df.columns]
    if missing:  # one concat, not one insert per column (a fragmented frame warns)
        df = pd.concat([df, pd.DataFrame(np.nan, index=df.index, columns=missing)], axis=1)
    for col in ("variant", "dtype", "layout", "config_key", "commit", "device", "sweep_id", "reason", "timer",
                "bench_kind", "compile_mode", "call_path", "model", "modifiers", *EXPLAIN_TEXT_COLUMNS):
        df[col] = text(df[col])
    df["status"] = text(df["status"]).replace("", "error")
    df[TIMED_COLUMN] = text(df.get(TIMED_COLUMN, pd.Series("", index=df.index))).replace("", "backward")
    df["correct"] = df["correct"].map(as_bool).fillna(False).astype(bool)
    df["causal"] = df["causal"].map(as_bool).fillna(False).astype(bool)
    # Absent flag: timings count on a GPU and never on the CPU interpreter.
    meaningful = df["timing_meaningful"].map(as_bool)
    df["timing_meaningful"] = meaningful.fillna(df["device"] != "cpu-interpreter").astype(bool)
    df["dirty"] = df["dirty"].map(as_bool).fillna(False).astype(bool)
    # A design mode, not a tuning knob: the deterministic atomic backward is its own series everywhere, never
    # "the fastest block config" of atomic.
    deterministic = df["deterministic"].map(as_bool).fillna(False).astype(bool)
    df["variant"] = df["variant"].where(~deterministic, df["variant"] + "+deterministic")
    for col in ("batch", "heads", "kv_heads", "seq", "seq_k", "head_dim", *MEASURE_COLUMNS, *EXPLAIN_COLUMNS,
                *STEP_MEASURE_COLUMNS, "peak_tflops"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df["seq_k"] = df["seq_k"].fillna(df["seq"])
    df["kv_heads"] = df["kv_heads"].fillna(df["heads"])
    # issue 47 (rows before it: V's head dim is head_dim, no sink); both are in the `modifiers` shape text too
    df["head_dim_v"] = pd.to_numeric(df.get("head_dim_v", pd.Series(np.nan, index=df.index)),
                                     errors="coerce").fillna(df["head_dim"])
    df["sink"] = df.get("sink", pd.Series(False, index=df.index)).map(as_bool).fillna(False).astype(bool)
    # The peak for the row's own dtype: peak_tflops_<dtype> where the runner wrote one, else peak_tflops (the
    # GPU's dense bf16 peak, which is also the fp16 one) for bf16/fp16 rows; NaN when unknown.
    df[PEAK] = np.nan
    for dt in ("bf16", "fp16", "fp32"):
        col = f"peak_tflops_{dt}"
        if col in df.columns:
            df[PEAK] = df[PEAK].where(df["dtype"] != dt, pd.to_numeric(df[col], errors="coerce"))
    df[PEAK] = df[PEAK].fillna(df["peak_tflops"].where(df["dtype"].isin(("bf16", "fp16"))))
    name = text(df["gpu_name"]).str.strip()
    df[GPU] = name.where(name != "", df["device"].where(df["device"] != "", "unknown device"))
    df["_ts"] = pd.to_datetime(df["timestamp"], utc=True, errors="coerce", format="mixed")
    if df["config_key"].eq("").any():  # no key: the config columns are the key
        steps = is_model_step(df)
        kernel_key = row_keys(df, ["variant", *SHAPE_COLUMNS, "dtype", *block_cols])
        step_key = row_keys(df, [STEP_KIND_COLUMN, "variant", "compile_mode", *step_cols])
        fallback = kernel_key.where(~steps, step_key)
        df["config_key"] = df["config_key"].where(df["config_key"] != "", fallback)
    df = fill_block_defaults(df)
    df["join_key"] = join_keys(df)
    return df.copy()  # one block of columns again after the inserts above
