"""One cell of a table as text or as a flag, whatever type pandas read it as."""
from __future__ import annotations

import math

import pandas as pd


def text(values: pd.Series) -> pd.Series:
    """Values as plain str, missing ones as '' (pandas 3's str dtype would keep NaN)."""
    return pd.Series([text_value(v) for v in values], index=values.index, dtype=object)


def row_keys(df: pd.DataFrame, cols) -> pd.Series:
    """One string per row joining ``cols`` (as ``text``): a hashable key where NaN equals NaN."""
    if df.empty:
        return pd.Series([], index=df.index, dtype=object)
    return df[list(cols)].apply(text).agg("|".join, axis=1)


def text_value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return str(int(value)) if value.is_integer() else str(value)
    try:
        if pd.isna(value):
            return ""
    except (TypeError, ValueError):
        pass
    return str(value)


def as_bool(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        return None
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return bool(value)
