"""Rows as short text: a GPU name as a file slug, a shape, a model-step config, a row's block fields."""
from __future__ import annotations

import re

import pandas as pd

from runners.tables.cells import as_bool, text_value
from runners.tables.columns import BLOCK_FIELDS, SWITCH_FIELDS


def slug(text: str) -> str:
    """File-name slug of a GPU name: 'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3'."""
    text = re.sub(r"^nvidia\s+", "", str(text).strip(), flags=re.IGNORECASE).lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


def shape_text(row) -> str:
    """'B4 H16 N4096 D128 causal' (H16/4 with grouped KV heads, N4096×8192 when Nk differs)."""
    heads = f"H{int(row['heads'])}"
    if pd.notna(row["kv_heads"]) and row["kv_heads"] != row["heads"]:
        heads += f"/{int(row['kv_heads'])}"
    seq = f"N{int(row['seq'])}"
    if pd.notna(row["seq_k"]) and row["seq_k"] != row["seq"]:
        seq += f"×{int(row['seq_k'])}"
    text = f"B{int(row['batch'])} {heads} {seq} D{int(row['head_dim'])}"
    text += " causal" if bool(row["causal"]) else ""
    if row.get("layout") not in (None, "", "nan") and pd.notna(row.get("layout")):
        text += f" {row['layout']}"
    if text_value(row.get("modifiers")):
        text += f" {text_value(row['modifiers'])}"
    return text


def step_text(row) -> str:
    """A model-step row's model config, as runners.model.config labels it: 'gpt_d64: L2 d256 H4/4 D64 B2 N4096 bf16
    causal'."""
    def n(col):
        return text_value(row[col]) or "?"
    return (f"{row['model'] or '?'}: L{n('layers')} d{n('d_model')} H{n('heads')}/{n('kv_heads')} D{n('head_dim')} "
            f"B{n('batch')} N{n('seq')} {row['dtype']}{' causal' if bool(row['causal']) else ''}")


def blocks_text(row) -> str:
    """The block fields a row sets, compactly: 'M1=64 N1=128 M2=128 N2=64 w8 s3'."""
    parts = []
    for col in BLOCK_FIELDS:
        value = row.get(col)
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            continue
        if col == "num_warps":
            parts.append(f"w{int(value)}")
        elif col == "num_stages":
            parts.append(f"s{int(value)}")
        elif col in SWITCH_FIELDS:
            if as_bool(value):
                parts.append(col)
        else:
            parts.append(f"{col.replace('BLOCK_', '')}={int(value)}")
    return " ".join(parts)
