"""Reading result tables without drawing: load, normalise, which rows are results, key=value arguments.

Used by ``runners/regress.py`` and by ``plots/`` (pandas only, no matplotlib; runners never import plots). A row
is a *result* only when ``status == "ok"`` and ``correct`` is True; every other row may only ever be shown as a
failure.
"""
from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from runners.tables.results import TableError as _TableError
from runners.tables.results import load as _runner_load  # the one way to read tables

FLOP_CONVENTION = "FA convention: bwd = 2.5×fwd, causal halved"
# Designs and block fields come from the variant registry and the Blocks dataclasses (issue 23), read on first use:
# importing runners.tables loads no variant (tests/test_layers.py). They read as tuples and follow new registrations.
REFERENCE = "reference"  # the fp32 reference: listed last among the baselines
# The block columns' order before they were derived: these stay first (and stay known for old tables) so that
# column order and rendered blocks do not move. Not a list to extend: a new field is found in its dataclass.
_COLUMN_ORDER = ("BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "BLK_SLICE_FACTOR",
                 "num_warps", "num_stages", "num_warps1", "num_stages1", "num_warps2", "num_stages2",
                 "prescale", "longest_first", "deterministic", "split_dkdv", "split_d")
_VARIANTS_MODULE = None


def _variants():
    """The ``variants`` package, imported on first use with the interpreter switch set first as the runner does."""
    global _VARIANTS_MODULE
    if _VARIANTS_MODULE is None:
        from runners.point import env
        env.use_interpreter_without_gpu()
        import variants
        _VARIANTS_MODULE = variants
    return _VARIANTS_MODULE


def registered_variants() -> list:
    """[(name, variant instance)] of every registered variant, in registration order."""
    v = _variants()
    return [(name, v.get(name)) for name in v.registry.registered()]


def triton_variants() -> tuple:
    """Every registered flash-bwd design (a ``TritonVariant``), in registration order."""
    base = _variants().TritonVariant
    return tuple(name for name, impl in registered_variants() if isinstance(impl, base))


def baseline_variants() -> tuple:
    """Every other registered variant (the baselines), in registration order, the reference last."""
    designs = set(triton_variants())
    others = [name for name, _ in registered_variants() if name not in designs]
    return tuple(sorted(others, key=lambda name: name == REFERENCE))


def _declared_fields() -> dict:
    """{block field: its declared default} over every registered variant's Blocks dataclass (first declaration
    wins), in registration and field order."""
    from dataclasses import MISSING, fields
    found = {}
    for _, impl in registered_variants():
        for f in fields(impl.Blocks):
            found.setdefault(f.name, f.default if f.default is not MISSING else None)
    return found


def block_fields() -> tuple:
    """The union of every registered variant's block fields: the columns known before (``_COLUMN_ORDER``) first,
    then new fields in registration and field order."""
    declared = _declared_fields()
    return _COLUMN_ORDER + tuple(name for name in declared if name not in _COLUMN_ORDER)


def switch_fields() -> tuple:
    """The boolean block fields (shown by name when true), in ``block_fields`` order."""
    declared = _declared_fields()
    return tuple(name for name in block_fields() if isinstance(declared.get(name), bool))


class _FromRegistry(Sequence):
    """A tuple computed from the registry on first use, and again after a variant registers (a plugin)."""

    def __init__(self, compute):
        self._compute, self._size, self._value = compute, -1, ()

    def _get(self) -> tuple:
        size = len(_variants().registry.registered())
        if size != self._size:
            self._value, self._size = tuple(self._compute()), size
        return self._value

    def __getitem__(self, index):
        return self._get()[index]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self):
        return iter(self._get())

    def __contains__(self, item) -> bool:
        return item in self._get()

    def __eq__(self, other) -> bool:
        return self._get() == (tuple(other) if isinstance(other, (Sequence, _FromRegistry)) else other)

    def __hash__(self) -> int:
        return hash(self._get())

    def __add__(self, other) -> tuple:
        return self._get() + tuple(other)

    def __radd__(self, other) -> tuple:
        return tuple(other) + self._get()

    def __repr__(self) -> str:
        return repr(self._get())


TRITON_VARIANTS = _FromRegistry(triton_variants)  # every registered TritonVariant
BASELINE_VARIANTS = _FromRegistry(baseline_variants)
VARIANT_ORDER = _FromRegistry(lambda: triton_variants() + baseline_variants())
VARIANT_LABELS = {
    "sdpa_flash": "sdpa_flash (FA2)",
    "sdpa_cudnn": "sdpa_cudnn (cuDNN)",
    "sdpa_efficient": "sdpa_efficient (mem-eff)",
    "flex": "flex (FlexAttention)",
    "reference": "reference (PyTorch math)",
}
BLOCK_FIELDS = _FromRegistry(block_fields)  # every registered variant's block fields
SWITCH_FIELDS = _FromRegistry(switch_fields)  # booleans: shown by name when true
SHAPE_COLUMNS = ("batch", "heads", "kv_heads", "seq", "seq_k", "head_dim", "causal", "layout")
ENV_COLUMNS = ("device", "gpu_name", "compute_capability", "sm_count", "driver", "cuda", "torch", "triton",
               "python", "hostname", "commit", "dirty", "timestamp", "sweep_id", "peak_tflops")
MEASURE_COLUMNS = ("ms", "ms_p20", "ms_p80", "tflops", "tflops_p20", "tflops_p80", "executed_tflops", "pct_peak",
                   "peak_mem_bytes", "workspace_bytes", "max_abs_dq", "max_abs_dk", "max_abs_dv", "rel_dq",
                   "rel_dk", "rel_dv")
EXPLAIN_COLUMNS = ("kernel_ms_sum", "kernel_launches", "top_kernel_share", "n_regs", "n_spills", "smem_bytes",
                   "compiled_num_warps", "compiled_num_stages", "programs_per_sm")  # numeric; runners/profile.py
EXPLAIN_TEXT_COLUMNS = ("kernel_ms", "top_kernel", "resources_json", "top_triton_kernel", "occupancy_limiter",
                        "profile_note")  # JSON / names; '' when absent (rows before issue 10, CPU interpreter)
STEP_KIND = "model_step"  # bench_kind of runners.model_step rows (a training step); any other: a kernel row
STEP_MEASURE_COLUMNS = ("attn_bwd_ms", "attn_bwd_share", "loss_max_dev", "loss_spread", "loss_tol")
STEP_KIND_COLUMN = "bench_kind"
STEP_TIMING_KEYS = ("warmup", "rep")  # how long a step is timed, not what: out of its join key (as bench.rep is)
GPU = "gpu_label"  # derived column: gpu_name, or the device ("cpu-interpreter") when there is no GPU name
PEAK = "dtype_peak_tflops"  # derived column: the GPU's dense peak for the row's dtype (NaN when unknown)


class UsageError(Exception):
    """A bad argument or unusable input: ``cli`` prints it as one line on stderr and exits 2."""


def step_config_columns() -> tuple:
    """A model-step row's config columns: `model` (the conf/model file) and every ModelConfig field, derived from
    the dataclass (runners.model_config), so a key added there is a column here without an edit."""
    from dataclasses import fields

    from runners.model.config import ModelConfig
    return ("model", *(f.name for f in fields(ModelConfig) if f.name != "name"))


def cli(main):
    """Decorate a ``main(argv) -> int``: a UsageError becomes one line on stderr and exit status 2."""
    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except UsageError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return wrapped


# --------------------------------------------------------------------------------------------------- arguments
def parse_args(argv: list[str] | None, defaults: dict, prog: str, usage: str) -> dict:
    """``key=value`` arguments (a leading ``--`` is allowed) over ``defaults``; types follow the default.

    ``None`` defaults are strings; booleans accept true/false/1/0/yes/no. Unknown keys and bad values are a
    one-line UsageError (exit 2). ``-h``/``--help`` prints ``usage`` and exits 0.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = dict(defaults)
    for token in argv:
        if token in ("-h", "--help", "help"):
            print(usage)
            raise SystemExit(0)
        key, sep, value = token.lstrip("-").partition("=")
        if not sep:
            raise UsageError(f"{prog}: expected key=value, got {token!r}; known keys: {', '.join(defaults)}")
        key = key.replace("-", "_")
        if key not in defaults:
            raise UsageError(f"{prog}: unknown key {key!r}; known keys: {', '.join(defaults)}")
        args[key] = coerce(prog, key, value, defaults[key])
    return args


def coerce(prog: str, key: str, value: str, default):
    if isinstance(default, bool):
        low = value.strip().lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise UsageError(f"{prog}: {key}={value!r}: expected true or false")
    if isinstance(default, (int, float)):
        try:
            return type(default)(value)
        except ValueError:
            raise UsageError(f"{prog}: {key}={value!r}: expected a {type(default).__name__}") from None
    if value.strip().lower() in ("", "null", "none"):
        return None
    return value


def require(args: dict, key: str, prog: str) -> str:
    if not args.get(key):
        raise UsageError(f"{prog}: {key}=<path> is required")
    return args[key]


# ------------------------------------------------------------------------------------------------------ tables
def load(path: str | Path, strict: bool = False, skipped: list | None = None) -> pd.DataFrame:
    """Every result row under ``path`` (a parquet file, or a directory searched recursively), normalised.

    A file that is not a result table (corrupt, foreign, empty, unreadable) is skipped with one
    ``warning: skipped <file>: <why>`` line on stderr, or, with ``strict``, is a UsageError naming it (exit 2).
    ``skipped``: a list that also receives each skipped file as ``'<file>: <why>'`` (a report names them).
    Reads with ``runners.results.load``.
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise UsageError(f"results path {str(path)!r} does not exist")

    def warn(line: str) -> None:
        print(line, file=sys.stderr)
        if skipped is not None:
            skipped.append(line.removeprefix("warning: skipped "))

    try:
        df = _runner_load(path, strict=strict, warn=warn)
    except _TableError as err:  # one line naming the file
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
                *EXPLAIN_TEXT_COLUMNS, "correct", "timing_meaningful", "bench_kind", "compile_mode", *step_cols,
                *STEP_MEASURE_COLUMNS)
    missing = [col for col in dict.fromkeys(expected) if col not in df.columns]
    if missing:  # one concat, not one insert per column (a fragmented frame warns)
        df = pd.concat([df, pd.DataFrame(np.nan, index=df.index, columns=missing)], axis=1)
    for col in ("variant", "dtype", "layout", "config_key", "commit", "device", "sweep_id", "reason", "timer",
                "bench_kind", "compile_mode", "model", *EXPLAIN_TEXT_COLUMNS):
        df[col] = text(df[col])
    df["status"] = text(df["status"]).replace("", "error")
    df["correct"] = df["correct"].map(_as_bool).fillna(False).astype(bool)
    df["causal"] = df["causal"].map(_as_bool).fillna(False).astype(bool)
    # Absent flag: timings count on a GPU and never on the CPU interpreter.
    meaningful = df["timing_meaningful"].map(_as_bool)
    df["timing_meaningful"] = meaningful.fillna(df["device"] != "cpu-interpreter").astype(bool)
    df["dirty"] = df["dirty"].map(_as_bool).fillna(False).astype(bool)
    # A design mode, not a tuning knob: the deterministic atomic backward is its own series everywhere, never
    # "the fastest block config" of atomic.
    deterministic = df["deterministic"].map(_as_bool).fillna(False).astype(bool)
    df["variant"] = df["variant"].where(~deterministic, df["variant"] + "+deterministic")
    for col in ("batch", "heads", "kv_heads", "seq", "seq_k", "head_dim", *MEASURE_COLUMNS, *EXPLAIN_COLUMNS,
                *STEP_MEASURE_COLUMNS, "peak_tflops"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df["seq_k"] = df["seq_k"].fillna(df["seq"])
    df["kv_heads"] = df["kv_heads"].fillna(df["heads"])
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


# ---------------------------------------------------------------------------------------------- join keys
@functools.lru_cache(maxsize=None)
def declared_defaults(variant: str) -> tuple:
    """((field, declared default), ...) of the variant's Blocks dataclass; () for a variant the code does not
    know (rows of a removed variant keep every field in their key). Imports ``variants`` on first use (the
    dataclasses live with the variants), with the interpreter switch set first as the runner does."""
    from dataclasses import MISSING, fields

    try:
        blocks = _variants().get(variant).Blocks
    except (KeyError, ValueError):
        return ()
    return tuple((f.name, f.default) for f in fields(blocks) if f.default is not MISSING)


def _base_variant(name: str) -> str:
    return name[: -len("+deterministic")] if name.endswith("+deterministic") else name


def is_triton(variant: str) -> bool:
    """A flash-bwd design (either mode), not a baseline."""
    return _base_variant(variant) in TRITON_VARIANTS


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
    return {f: _plain(row[f]) for f in BLOCK_FIELDS if f in row and _text(row[f]) != ""}


def join_key(variant: str, shape: dict, dtype: str, blocks: dict, timer: str) -> str:
    """The key that joins rows across commits and GPUs: variant, shape, dtype, layout, timer and the block
    fields whose value differs from the Blocks dataclass's declared default (or that it does not declare).
    Adding a block field with a default therefore leaves the keys of the configs measured before unchanged:
    old rows lack the field, new rows have it at its default, and neither puts it in the key."""
    defaults = dict(declared_defaults(variant))
    kept = {k: v for k, v in blocks.items() if not (k in defaults and _same(v, defaults[k]))}
    text_blocks = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(kept.items()))
    s = {k: _text(v) for k, v in shape.items()}
    return (f"{variant}|b={s['batch']}|h={s['heads']}|hkv={s['kv_heads']}|nq={s['seq']}|nk={s['seq_k']}"
            f"|d={s['head_dim']}|causal={int(bool(shape['causal']))}|{dtype}|{s['layout']}|blocks[{text_blocks}]"
            f"|{timer}")


def _same(value, default) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):  # True == 1 in Python: compare as booleans only
        return isinstance(value, (bool, np.bool_)) and bool(value) == default
    return value == default


def step_join_key(config_key: str) -> str:
    """The join key of a model-step row: its config_key (runners.model_step writes the whole config as JSON: the
    model's keys, variant, compile_mode, agreement baseline, seed) less the timing knobs (``STEP_TIMING_KEYS``), in
    one canonical form behind the bench kind, so that it never equals a kernel row's key. A key that is not JSON is
    kept as it is."""
    try:
        config = json.loads(config_key)
    except ValueError:
        return f"{STEP_KIND}|{config_key}"
    if not isinstance(config, dict):
        return f"{STEP_KIND}|{config_key}"
    config = {k: v for k, v in config.items() if k not in STEP_TIMING_KEYS}
    return f"{STEP_KIND}|" + json.dumps(config, sort_keys=True, separators=(",", ":"))


def join_keys(df: pd.DataFrame) -> pd.Series:
    """``join_key`` of every row of a normalised table (``step_join_key`` for a model-step row)."""
    keys = [step_join_key(row["config_key"]) if row[STEP_KIND_COLUMN] == STEP_KIND else
            join_key(_base_variant(row["variant"]), {c: row[c] for c in SHAPE_COLUMNS}, row["dtype"],
                     row_blocks(row), row["timer"])
            for _, row in df.iterrows()]
    return pd.Series(keys, index=df.index, dtype=object)


def fill_block_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """Block columns a row's variant declares but the row lacks (written before the field existed) get the
    field's declared default, so old and new rows of one config show the same blocks. Model-step rows have no
    blocks of their own (the design picks them per layer): they are left as they are."""
    kernel = ~is_model_step(df)
    for variant in df.loc[kernel, "variant"].unique():
        fields = declared_defaults(_base_variant(variant))
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


def text(values: pd.Series) -> pd.Series:
    """Values as plain str, missing ones as '' (pandas 3's str dtype would keep NaN)."""
    return pd.Series([_text(v) for v in values], index=values.index, dtype=object)


def row_keys(df: pd.DataFrame, cols) -> pd.Series:
    """One string per row joining ``cols`` (as ``text``): a hashable key where NaN equals NaN."""
    if df.empty:
        return pd.Series([], index=df.index, dtype=object)
    return df[list(cols)].apply(text).agg("|".join, axis=1)


def _text(value) -> str:
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


def _as_bool(value):
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


def is_model_step(df: pd.DataFrame) -> pd.Series:
    """Rows of the model-step benchmark (a training step); every other row times the backward kernel alone."""
    if STEP_KIND_COLUMN not in df.columns:
        return pd.Series(False, index=df.index, dtype=bool)
    return df[STEP_KIND_COLUMN].eq(STEP_KIND).astype(bool)


def kernel_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows that time the backward alone (what every TFLOPS figure and table is about)."""
    return df[~is_model_step(df)]


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


# --------------------------------------------------------------------------------------------------- labels
def variant_order(variants) -> list[str]:
    variants = list(dict.fromkeys(variants))
    known = [v for v in VARIANT_ORDER if v in variants]
    return known + sorted(v for v in variants if v not in VARIANT_ORDER)


def variant_label(variant: str) -> str:
    return VARIANT_LABELS.get(variant, variant)


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
    return text


def step_text(row) -> str:
    """A model-step row's model config, as runners.model_config labels it: 'gpt_d64: L2 d256 H4/4 D64 B2 N4096 bf16
    causal'."""
    def n(col):
        return _text(row[col]) or "?"
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
            if _as_bool(value):
                parts.append(col)
        else:
            parts.append(f"{col.replace('BLOCK_', '')}={int(value)}")
    return " ".join(parts)


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


__all__ = [
    "FLOP_CONVENTION", "TRITON_VARIANTS", "triton_variants", "baseline_variants", "block_fields", "switch_fields",
    "registered_variants", "is_triton", "SWITCH_FIELDS", "declared_defaults", "row_blocks", "join_key",
    "join_keys", "fill_block_defaults", "BASELINE_VARIANTS", "VARIANT_ORDER", "VARIANT_LABELS", "BLOCK_FIELDS",
    "SHAPE_COLUMNS", "ENV_COLUMNS", "MEASURE_COLUMNS",
    "EXPLAIN_COLUMNS", "EXPLAIN_TEXT_COLUMNS", "STEP_KIND", "STEP_KIND_COLUMN", "STEP_MEASURE_COLUMNS",
    "step_config_columns", "step_join_key", "is_model_step", "kernel_rows", "step_rows", "step_text", "GPU", "PEAK", "UsageError", "cli", "parse_args", "require", "load",
    "normalize", "text", "row_keys", "is_result", "is_wrong", "is_failed", "latest", "timed", "best_config",
    "pct_peak", "select_gpus", "select_dtype", "select_shape", "variant_order", "variant_label", "slug", "shape_text",
    "blocks_text", "geomean", "markdown_table",
]
