"""Which rows: kernel or model-step rows, results, wrong or failed rows, the newest per key, the fastest config,
and the GPU, dtype and shape a command asks for. A row is a *result* only when ``status == "ok"`` and ``correct``
is True."""
from __future__ import annotations

import numpy as np
import pandas as pd

from runners.tables.args import UsageError
from runners.tables.columns import (CALL_KINDS, GPU, HOST_KIND, PEAK, SHAPE_COLUMNS, STEP_KIND, STEP_KIND_COLUMN,
                                     TIMED_COLUMN)


def is_model_step(df: pd.DataFrame) -> pd.Series:
    """Rows of the model-step benchmark (a training step); every other row times the backward kernel alone."""
    if STEP_KIND_COLUMN not in df.columns:
        return pd.Series(False, index=df.index, dtype=bool)
    return df[STEP_KIND_COLUMN].eq(STEP_KIND).astype(bool)


def is_host_cost(df: pd.DataFrame) -> pd.Series:
    """Rows of the host-cost benchmark (runners.host_cost: host time of one eager forward + backward call)."""
    if STEP_KIND_COLUMN not in df.columns:
        return pd.Series(False, index=df.index, dtype=bool)
    return df[STEP_KIND_COLUMN].eq(HOST_KIND).astype(bool)


def is_call_row(df: pd.DataFrame) -> pd.Series:
    """Whole-call rows (a model step, a host-cost call): timed in ms per call, no TFLOPS, keyed by their config_key."""
    if STEP_KIND_COLUMN not in df.columns:
        return pd.Series(False, index=df.index, dtype=bool)
    return df[STEP_KIND_COLUMN].isin(CALL_KINDS).astype(bool)


def is_timed(df: pd.DataFrame, timed: str) -> pd.Series:
    """Kernel rows that time `timed` (backward, forward, train); a row without the column (before issue 42) times
    the backward."""
    if TIMED_COLUMN not in df.columns:
        return pd.Series(timed == "backward", index=df.index, dtype=bool)
    kinds = df[TIMED_COLUMN].astype(object).where(df[TIMED_COLUMN].notna(), "").astype(str)
    return kinds.replace("", "backward").eq(timed).astype(bool)


def kernel_rows(df: pd.DataFrame, timed: str | None = "backward") -> pd.DataFrame:
    """The kernel rows that time `timed` (default: the backward alone, what every TFLOPS figure and table is
    about; None: every kind, forward and train rows included)."""
    kernels = ~is_call_row(df)
    return df[kernels if timed is None else kernels & is_timed(df, timed)]


def step_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The model-step benchmark's rows."""
    return df[is_model_step(df)]


def is_result(df: pd.DataFrame) -> pd.Series:
    """The only rows that may be drawn as results: status ok and gradients correct."""
    return (df["status"] == "ok") & df["correct"].astype(bool)


def is_wrong(df: pd.DataFrame) -> pd.Series:
    """Rows whose gradients were checked and found wrong (status 'wrong', or ok but not correct)."""
    return (df["status"] == "wrong") | ((df["status"] == "ok") & ~df["correct"].astype(bool))


def is_failed(df: pd.DataFrame) -> pd.Series:
    """Not a result and not merely unsupported or skipped (not run): wrong, oom, compile_error, resources, error."""
    return ~is_result(df) & ~df["status"].isin(("unsupported", "skipped"))


def latest(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (join_key, GPU): the newest by timestamp (re-runs replace older rows)."""
    if df.empty:
        return df
    order = df.assign(_order=np.arange(len(df))).sort_values(["_ts", "_order"], na_position="first", kind="stable")
    return order.drop_duplicates(subset=["join_key", GPU], keep="last").drop(columns="_order")


def timed(df: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """Rows whose timings mean something; if a group has none (CPU interpreter), all rows and False."""
    meaningful = df[df["timing_meaningful"]]
    if len(meaningful):
        return meaningful, True
    return df, False


def best_config(results: pd.DataFrame, by=(GPU, "dtype", "variant", *SHAPE_COLUMNS)) -> pd.DataFrame:
    """Among result rows, the fastest block config per variant and shape (what an autotuner would pick)."""
    results = results[results["tflops"].notna()]
    if results.empty:
        return results
    idx = results.groupby(list(by), dropna=False, sort=False)["tflops"].idxmax()
    return results.loc[idx.values].reset_index(drop=True)


def pct_peak(df: pd.DataFrame) -> pd.Series:
    """The table's pct_peak, else 100 × tflops / the dtype's peak (NaN when the peak is unknown)."""
    derived = 100.0 * df["tflops"] / df[PEAK]
    return df["pct_peak"].where(df["pct_peak"].notna(), derived)


def select_gpus(df: pd.DataFrame, gpu: str | None, prog: str) -> list[str]:
    """GPU labels to draw: those containing ``gpu`` (case-insensitive), or all; a UsageError when none match."""
    labels = sorted(df[GPU].unique())
    if gpu:
        chosen = [g for g in labels if gpu.lower() in g.lower()]
        if not chosen:
            raise UsageError(f"{prog}: gpu={gpu!r} matches none of: {', '.join(labels)}")
        return chosen
    return labels


def select_dtype(df: pd.DataFrame, dtype: str | None, prog: str) -> pd.DataFrame:
    if not dtype:
        return df
    out = df[df["dtype"] == dtype]
    if out.empty:
        raise UsageError(f"{prog}: dtype={dtype!r} not in the tables; present: {', '.join(sorted(df['dtype'].unique()))}")
    return out


def select_shape(df: pd.DataFrame, batch=None, heads=None) -> pd.DataFrame:
    """Rows of the given batch and/or heads (None: any)."""
    if batch is not None:
        df = df[df["batch"] == int(batch)]
    if heads is not None:
        df = df[df["heads"] == int(heads)]
    return df
