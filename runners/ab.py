"""`python -m runners.ab`: one block field's (or sweep key's) two values measured on one machine, in both orders (the
method of issue 43's A/Bs: a field is a default only where it wins in both passes).

    python -m runners.ab variant=ws field=split_masked values=false,true \\
        cells="tokens=16384 hidden=2048 seq=1024,4096 head_dim=64,128 causal=true; batch=2 heads=16 seq=4096 head_dim=96"
    python -m runners.ab variant=ws field=forward values=gluon.pp3,gluon.pp3_lpt \\
        extra="isolate=false timed=forward" cells="tokens=16384 seq=1024,4096 head_dim=64 causal=true"
    python -m runners.ab variant=ws a="" b="blocks.swap_ab=true blocks.late_stats=true blocks.named_handover=true" \\
        cells="tokens=16384 hidden=2048 seq=1024,4096 head_dim=64 causal=true"
    python -m runners.ab variant=ws sets="base: | swap: blocks.swap_ab=true | swap1: blocks.swap_ab=true \\
        blocks.persistent=false" cells="tokens=16384 hidden=2048 seq=4096 head_dim=64 causal=true"

Override sets (``a=`` / ``b=`` instead of ``field=``): two sets of sweep overrides (one left out: the defaults), for a
design that changes several fields at once; each set's sweep is a process of its own (per cell and pass: pass a
runs A then B, pass b B then A), in its own results dir, and a row's ``ab_value`` is ``A`` or ``B``; the table is
``out/ab_sets.parquet``. ``sets=`` names more than two such sets, ``LABEL: overrides`` between ``|`` (an empty
one: the defaults): pass a runs them in the order given, pass b in reverse, a row's ``ab_value`` is its set's label,
and the table has ms(first) / ms(set) for every other set (a decomposition: which of a design's fields costs what).

A field is a block field (``field=FIELD`` or ``field=blocks.FIELD``, swept as ``blocks.FIELD=A,B`` and read from the
rows' ``block_overrides_json``) or a top-level sweep key
(a key of conf/config.yaml, e.g. ``forward``: ``FIELD=A,B``, read from the rows' column of that name; one that
config_key leaves out, as ``forward`` in backward rows, needs ``resume=false`` in ``extra``, else a pass skips its
second value as recorded). Pass a sweeps every cell with ``A,B`` (A measured first), pass b with ``B,A``: one
``runners.sweep -m`` process per cell and pass, each pass in its own results dir under ``out`` (a sweep skips the
points it finds on disk, so pass b must not see pass a's rows). The cells are sweep overrides, ``;`` between cells;
``extra`` is added to every cell (default ``isolate=false``: one process, as the GPU A/Bs ran). Then one flat table,
``out/ab_<field>.parquet`` (every row, with ``ab_pass`` and ``ab_value``), and per cell and pass the ratio ms(A) /
ms(B) (> 1: B is faster), printed. Exit 1 when a row is not ok or a cell lacks a value (the table is still written),
2 on a bad argument.
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from runners.point.env import CONF_DIR
from runners.tables.args import UsageError, cli, parse_args
from runners.tables.columns import SHAPE_COLUMNS
from runners.tables.results import load as load_rows

PROG = "runners.ab"
DEFAULTS = {"variant": "ws", "field": "", "values": "false,true", "cells": "", "extra": "isolate=false",
            "out": "results/ab", "sweep_id": "ab", "a": "", "b": "", "sets": ""}
SET_LABELS = ("A", "B")  # the override sets' values in ab_value
CELL_KEY = ("variant", "dtype", *SHAPE_COLUMNS, "head_dim_v", "window_left", "window_right", "softcap", "timed")


def override_sets(args: dict) -> dict[str, str]:
    """The labelled override sets of a run, in pass a's order: sets= (``LABEL: overrides | ...``), or a= / b= as A
    and B; {} for field= (one field's values)."""
    if args["sets"]:
        named: dict[str, str] = {}
        for part in args["sets"].split("|"):
            label, colon, overrides = part.partition(":")
            label = label.strip()
            if not colon or not label.replace("_", "").replace("-", "").isalnum():
                raise UsageError(f"{PROG}: sets={args['sets']!r}: each set is LABEL: overrides (a label of letters, "
                                 f"digits, - and _), between |; got {part.strip()!r}")
            if label in named:
                raise UsageError(f"{PROG}: sets: the label {label!r} is used twice")
            named[label] = " ".join(overrides.split())
        if len(named) < 2:
            raise UsageError(f"{PROG}: sets= needs two sets or more, e.g. sets=\"base: | swap: blocks.swap_ab=true\"")
        return named
    if args["a"] or args["b"]:  # an empty set (a= or b= left out): the defaults
        return dict(zip(SET_LABELS, (args["a"], args["b"])))
    return {}


def pass_values(values: tuple[str, str], name: str) -> str:
    """The sweep's value list of a pass: a in the given order, b reversed."""
    return ",".join(values if name == "a" else values[::-1])


@functools.cache
def sweep_keys() -> frozenset[str]:
    """The top-level sweep config keys (conf/config.yaml's: forward, timed, seq, ...)."""
    return frozenset(yaml.safe_load((CONF_DIR / "config.yaml").read_text()))


def field_name(text: str) -> str:
    """The field as the rows name it: field=blocks.group_split and field=group_split both name group_split."""
    return text[len("blocks."):] if text.startswith("blocks.") else text


def override_key(field: str) -> str:
    """The sweep override's key of a field: a top-level sweep key as it is, else blocks.FIELD."""
    return field if field in sweep_keys() else f"blocks.{field}"


def _sweep(cell: str, args: dict, overrides: list[str], results_dir: Path, sweep_id: str) -> list[str]:
    """One `runners.sweep -m` process: the cell's overrides, `extra`, then `overrides`, written under results_dir."""
    return [sys.executable, "-m", "runners.sweep", "-m", f"variant={args['variant']}", *cell.split(),
            *args["extra"].split(), *overrides, f"results_dir={results_dir}", f"sweep_id={sweep_id}",
            f"hydra.sweep.dir={results_dir / 'multirun'}"]


def sweep_argv(cell: str, args: dict, values: tuple[str, str], name: str, results_dir: Path) -> list[str]:
    """One `runners.sweep -m` process: the cell's overrides, the field's values in this pass's order."""
    return _sweep(cell, args, [f"{override_key(args['field'])}={pass_values(values, name)}"], results_dir,
                  f"{args['sweep_id']}_{name}")


def set_argv(cell: str, args: dict, label: str, overrides: str, name: str, results_dir: Path) -> list[str]:
    """One `runners.sweep -m` process of the override set `label` (its overrides, from override_sets) in pass
    `name`."""
    return _sweep(cell, args, overrides.split(), results_dir, f"{args['sweep_id']}_{name}_{label}")


def spelled(value) -> str:
    """A value as the command line spells it (true / false / 64 / gluon.pp3)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def field_value(block_overrides_json: str, field: str) -> str:
    """The block field's value in a row's overrides, as the command line spells it (true / false / 64)."""
    return spelled(json.loads(block_overrides_json or "{}").get(field))


def field_values(rows: pd.DataFrame, field: str) -> pd.Series:
    """Each row's value of the field: a top-level sweep key's from the row's column of that name, a block field's
    from block_overrides_json."""
    if field in sweep_keys():
        return rows[field].map(spelled)
    return rows["block_overrides_json"].map(lambda text: field_value(text, field))


def ratios(rows: pd.DataFrame, values: tuple[str, ...], field: str = "") -> pd.DataFrame:
    """Per cell and pass: ms of each value and ms(A) / ms(B) (``a/b``); with more than two values (sets=)
    ms(first) / ms(value) for each other value (``first/value``). A cell without a value has NaN there."""
    ok = rows[rows["status"] == "ok"]
    key = [col for col in CELL_KEY if col in ok.columns and col != field]  # the field tells values apart
    key = [col for col in key if ok[col].astype(str).nunique() > 1] or key[:1]  # what tells the cells apart
    table = ok.pivot_table(index=key + ["ab_pass"], columns="ab_value", values="ms", aggfunc="min", dropna=False)
    table = table.reindex(columns=list(values))
    if len(values) == 2:
        table["a/b"] = table[values[0]] / table[values[1]]
    else:
        for value in values[1:]:
            table[f"{values[0]}/{value}"] = table[values[0]] / table[value]
    return table.dropna(how="all", subset=list(values))


@cli
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, DEFAULTS, PROG, __doc__)
    args["field"] = field_name(args["field"])
    if args["sets"] and (args["a"] or args["b"]):
        raise UsageError(f"{PROG}: either sets= (labelled override sets) or a= / b= (two of them), not both")
    named = override_sets(args)
    sets = bool(named)
    if sets and args["field"]:
        raise UsageError(f"{PROG}: either field= (one field's two values) or a= / b= / sets= (override sets), not both")
    if not args["field"] and not sets:
        raise UsageError(f"{PROG}: field= names the block field (or top-level sweep key) to A/B (e.g. "
                         "field=split_masked, field=forward), or a= / b= two sets of overrides")
    values = tuple(named) if sets else tuple(v.strip() for v in args["values"].split(","))
    if not sets and (len(values) != 2 or values[0] == values[1]):
        raise UsageError(f"{PROG}: values={args['values']!r}: two different values, e.g. false,true")
    if sets and len(set(named.values())) < len(named):
        raise UsageError(f"{PROG}: a= and b= are the same overrides" if not args["sets"] else
                         f"{PROG}: sets: two sets have the same overrides")
    cells = [cell.strip() for cell in args["cells"].split(";") if cell.strip()]
    if not cells:
        raise UsageError(f"{PROG}: cells= names the sweep cells, e.g. cells=\"seq=4096 head_dim=64 causal=true\"")
    out = Path(args["out"])
    failed = 0
    for name in ("a", "b"):
        for index, cell in enumerate(cells, 1):
            if sets:  # one process per set, in the given order in pass a, reversed in pass b
                order = values if name == "a" else values[::-1]
                runs = [(set_argv(cell, args, label, named[label], name, out / f"pass_{name}" / label),
                         f"set {label}")
                        for label in order]
            else:
                runs = [(sweep_argv(cell, args, values, name, out / f"pass_{name}"),
                         f"{override_key(args['field'])}={pass_values(values, name)}")]
            for argv_, what in runs:
                print(f"pass {name}, cell {index}/{len(cells)}: {cell} {what}", flush=True)
                run = subprocess.run(argv_, text=True, capture_output=True)
                if run.returncode:
                    failed += 1
                    print(f"  sweep exit {run.returncode}: {(run.stderr or run.stdout).strip().splitlines()[-1:]}")
    parts = []
    for name in ("a", "b"):
        for label in values if sets else (None,):
            where = out / f"pass_{name}" / label if sets else out / f"pass_{name}"
            if where.is_dir():  # the rows' one reader; a file that is not a row table: a warning line
                part = load_rows(where, strict=False)
                if part is not None and len(part):
                    parts.append(part.assign(ab_pass=name, **({"ab_value": label} if sets else {})))
    if not parts:
        print(f"{PROG}: no rows under {out}")
        return 1
    rows = pd.concat(parts, ignore_index=True)
    if not sets:
        rows["ab_value"] = field_values(rows, args["field"])
    table_path = out / f"ab_{args['field'] or 'sets'}.parquet"
    rows.to_parquet(table_path)
    table = ratios(rows, values, args["field"])
    print(table.round(4).to_string())
    bad = rows[rows["status"] != "ok"]
    for row in bad.itertuples():
        print(f"not ok: pass {row.ab_pass} {args['field'] or 'set'}={row.ab_value} {row.config_key}: {row.status} "
              f"{row.reason}")
    missing = int(table[list(values)].isna().any(axis=1).sum())
    print(f"rows: {table_path} ({len(rows)} rows, {len(bad)} not ok, {missing} cell(s) without every value)")
    return 1 if failed or len(bad) or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
