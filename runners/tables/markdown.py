"""Markdown tables for reports, and the geometric mean their summaries use."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd


def geomean(values) -> float:
    values = np.asarray([v for v in values if pd.notna(v) and v > 0], dtype=float)
    return float(np.exp(np.log(values).mean())) if len(values) else float("nan")


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of ``df`` (strings as given; '|' escaped)."""
    if df.empty:
        return "_(none)_\n"
    cols = [str(c) for c in df.columns]

    def cell(value) -> str:
        text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"
