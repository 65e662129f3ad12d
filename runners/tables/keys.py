"""The keys that join rows across commits and GPUs: a kernel row's variant, shape, dtype, layout, timer and the
block fields off their declared defaults; a model-step row's config less its timing knobs."""
from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd

from runners.tables.cells import text_value
from runners.tables.columns import (BLOCK_FIELDS, CALL_KINDS, SHAPE_COLUMNS, STEP_KIND, STEP_KIND_COLUMN,
                                     STEP_TIMING_KEYS, TIMED_COLUMN, base_variant, variants_module)
from runners.tables.select import is_call_row


@functools.lru_cache(maxsize=None)
def declared_defaults(variant: str) -> tuple:
    """((field, declared default), ...) of the variant's Blocks dataclass; () for a variant the code does not
    know (rows of a removed variant keep every field in their key). Imports ``variants`` on first use (the
    dataclasses live with the variants), with the interpreter switch set first as the runner does."""
    from dataclasses import MISSING, fields

    try:
        blocks = variants_module().get(variant).Blocks
    except (KeyError, ValueError):
        return ()
    return tuple((f.name, f.default) for f in fields(blocks) if f.default is not MISSING)


def _plain(value):
    """A block value as the runner wrote it: numpy scalars and integral floats back to bool / int."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def row_blocks(row) -> dict:
    """A row's resolved block fields: its ``blocks_json``, else its non-empty block columns."""
    raw = row.get("blocks_json")
    if isinstance(raw, str) and raw.strip():
        try:
            return {k: _plain(v) for k, v in json.loads(raw).items()}
        except (ValueError, AttributeError):
            pass
    return {f: _plain(row[f]) for f in BLOCK_FIELDS if f in row and text_value(row[f]) != ""}


def join_key(variant: str, shape: dict, dtype: str, blocks: dict, timer: str) -> str:
    """The key that joins rows across commits and GPUs: variant, shape, dtype, layout, timer and the block
    fields whose value differs from the Blocks dataclass's declared default (or that it does not declare).
    Adding a block field with a default therefore leaves the keys of the configs measured before unchanged:
    old rows lack the field, new rows have it at its default, and neither puts it in the key."""
    defaults = dict(declared_defaults(variant))
    kept = {k: v for k, v in blocks.items() if not (k in defaults and _same(v, defaults[k]))}
    text_blocks = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(kept.items()))
    s = {k: text_value(v) for k, v in shape.items()}
    return (f"{variant}|b={s['batch']}|h={s['heads']}|hkv={s['kv_heads']}|nq={s['seq']}|nk={s['seq_k']}"
            f"|d={s['head_dim']}|causal={int(bool(shape['causal']))}|{dtype}|{s['layout']}|blocks[{text_blocks}]"
            f"|{timer}" + (f"|mods[{s['modifiers']}]" if s.get("modifiers") else ""))  # plain rows: keys as before


def timed_suffix(row) -> str:
    """'' for a row timing the backward (keys as before issue 42), else '|timed=<kind>' and, where the forward
    asked for is not stock, '|fwd=<forward>' (the forward is what such a row times), as the config_key has them."""
    timed = text_value(row.get(TIMED_COLUMN, "")) or "backward"
    if timed == "backward":
        return ""
    forward = text_value(row.get("forward", "")) or "stock"
    return f"|timed={timed}" + (f"|fwd={forward}" if forward != "stock" else "")


def _same(value, default) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):  # True == 1 in Python: compare as booleans only
        return isinstance(value, (bool, np.bool_)) and bool(value) == default
    return value == default


def step_join_key(config_key: str, kind: str = STEP_KIND) -> str:
    """The join key of a whole-call row (``CALL_KINDS``): its config_key (runners.model_step writes the whole config as
    JSON: the model's keys, variant, compile_mode, agreement baseline, seed; runners.host_cost its shape, variant,
    call path, seed) less the timing knobs (``STEP_TIMING_KEYS``), in one canonical form behind the bench kind, so
    that it never equals a kernel row's key nor another kind's. A key that is not JSON is kept as it is."""
    try:
        config = json.loads(config_key)
    except ValueError:
        return f"{kind}|{config_key}"
    if not isinstance(config, dict):
        return f"{kind}|{config_key}"
    config = {k: v for k, v in config.items() if k not in STEP_TIMING_KEYS}
    return f"{kind}|" + json.dumps(config, sort_keys=True, separators=(",", ":"))


def join_keys(df: pd.DataFrame) -> pd.Series:
    """``join_key`` of every row of a normalised table (``step_join_key`` for a model-step row)."""
    keys = [step_join_key(row["config_key"], row[STEP_KIND_COLUMN]) if row[STEP_KIND_COLUMN] in CALL_KINDS else
            join_key(base_variant(row["variant"]), {c: row[c] for c in SHAPE_COLUMNS}, row["dtype"],
                     row_blocks(row), row["timer"]) + timed_suffix(row)
            for _, row in df.iterrows()]
    return pd.Series(keys, index=df.index, dtype=object)


def fill_block_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """Block columns a row's variant declares but the row lacks (written before the field existed) get the
    field's declared default, so old and new rows of one config show the same blocks. Model-step rows have no
    blocks of their own (the design picks them per layer): they are left as they are."""
    kernel = ~is_call_row(df)
    for variant in df.loc[kernel, "variant"].unique():
        fields = declared_defaults(base_variant(variant))
        if not fields:
            continue
        mine = (df["variant"] == variant) & kernel
        for name, default in fields:
            if name not in df.columns:
                df[name] = pd.Series(np.nan, index=df.index, dtype=object)
            missing = mine & df[name].isna()
            if missing.any():
                if df[name].dtype != object:
                    df[name] = df[name].astype(object)
                df.loc[missing, name] = default
    return df
