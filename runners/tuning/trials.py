"""Rows <-> Optuna trials: a study is rebuilt from its parquet rows (resume, plots), never kept elsewhere.

A row of a study (its `study` column set by runners.tune) is one trial: status ok -> a COMPLETE trial whose
value is the median backward time `ms`; any other status (wrong, resources, oom, compile_error, error, and
unsupported for an invalid block combination) -> a PRUNED trial with the status and reason as user attrs.
The trial's params are the row's block columns of the searched fields. Pure pandas + optuna (plots use it).
"""
from __future__ import annotations

import json
import math

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

OK = "ok"


def distributions(space: dict) -> dict:
    """{field: CategoricalDistribution(candidates)}: every block field is a categorical choice (ordered ints
    included: the candidate lists are short and their effect is not monotonic)."""
    return {name: CategoricalDistribution(tuple(values)) for name, values in space.items()}


def params_key(params: dict) -> str:
    """Stable identity of one config of the space (the tuner's duplicate check)."""
    return json.dumps({k: plain_value(v) for k, v in sorted(params.items())})


def plain_value(value):
    if hasattr(value, "item"):  # numpy scalars from parquet
        value = value.item()
    return value


def matching_candidate(value, candidates: tuple):
    """The candidate equal to a row's value (64.0 from a float column -> 64), else None."""
    value = plain_value(value)
    for c in candidates:
        if type(c) is bool or type(value) is bool:
            if type(c) is bool and type(value) is bool and c == value:
                return c
        elif c == value:
            return c
    return None


def row_params(row: dict, space: dict) -> dict | None:
    """The row's values of the searched fields, as candidates of the space; None if one is outside it."""
    params = {}
    for name, candidates in space.items():
        if name not in row:
            return None
        value = matching_candidate(row[name], tuple(candidates))
        if value is None:
            return None
        params[name] = value
    return params


def outcome(row: dict) -> tuple[TrialState, float | None]:
    """(state, value) of a row: COMPLETE with its ms when ok and correct, else PRUNED."""
    ms = row.get("ms")
    if row.get("status") == OK and bool(row.get("correct")) and ms is not None and ms == ms and ms > 0:
        return TrialState.COMPLETE, float(ms)
    return TrialState.PRUNED, None


def kernel_times(row: dict) -> dict | None:
    """{kernel: ms per backward} of a row's `kernel_ms` JSON; None when absent or unreadable (CPU interpreter:
    None from the runner, '' from a table; a profiler failure)."""
    text = row.get("kernel_ms")
    if not isinstance(text, str) or not text:
        return None
    try:
        times = json.loads(text)
    except ValueError:
        return None
    if not isinstance(times, dict) or not all(isinstance(v, (int, float)) for v in times.values()):
        return None
    return times


def kernel_value(row: dict, kernel: str) -> float | None:
    """The ms per backward of one kernel in a row's kernel_ms; None when the row has no such time."""
    ms = (kernel_times(row) or {}).get(kernel)
    return float(ms) if ms is not None and ms == ms and ms > 0 else None


def user_attrs(row: dict) -> dict:
    attrs = {"status": str(row.get("status")), "reason": str(row.get("reason") or ""),
             "config_key": str(row.get("config_key") or "")}
    tflops = row.get("tflops")
    if tflops is not None and tflops == tflops:
        attrs["tflops"] = float(tflops)
    return attrs


def frozen_trial(row: dict, params: dict, dists: dict, value: float | None = None) -> optuna.trial.FrozenTrial:
    """The trial of a row; `value` replaces a COMPLETE row's ms (a per-kernel study's objective)."""
    state, ms = outcome(row)
    value = value if state == TrialState.COMPLETE and value is not None else ms
    return optuna.trial.create_trial(state=state, value=value, params=params,
                                     distributions={k: dists[k] for k in params}, user_attrs=user_attrs(row))


def study_rows(df, study: str | None = None):
    """The rows of the studies in a table (one study when named), latest row per config, in trial order."""
    if df.empty or "study" not in df:
        return df.iloc[0:0]
    rows = df[df["study"].notna()]
    if study is not None:
        rows = rows[rows["study"] == study]
    order = [c for c in ("point_index", "timestamp") if c in rows]
    rows = rows.sort_values("timestamp", kind="stable").drop_duplicates(["study", "config_key"], keep="last")
    return rows.sort_values(order, kind="stable").reset_index(drop=True)


def searched_fields(rows) -> list[str]:
    """Fields a study searched, read back from its rows: the trial overrides that vary between its rows."""
    names: dict = {}
    for text in rows.get("block_overrides_json", []):
        for k, v in json.loads(text or "{}").items():
            names.setdefault(k, set()).add(json.dumps(v))
    return [k for k, values in names.items() if len(values) > 1]


def space_from_rows(rows) -> dict:
    """{field: sorted values seen}: the space a plot shows when only the rows are at hand."""
    space = {}
    for name in searched_fields(rows):
        values = [plain_value(v) for v in rows[name].dropna().unique()]
        space[name] = tuple(sorted(values, key=lambda v: (isinstance(v, bool), v)))
    return space


def study_from_rows(rows, space: dict, name: str = "study", sampler=None) -> optuna.Study:
    """An in-memory Optuna study holding one trial per row (rows outside `space` are left out)."""
    study = optuna.create_study(study_name=name, direction="minimize", sampler=sampler)
    dists = distributions(space)
    for row in rows.to_dict("records"):
        params = row_params(row, space)
        if params is not None:
            study.add_trial(frozen_trial(row, params, dists))
    return study


def best_value(study: optuna.Study) -> float:
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    return min((t.value for t in done), default=math.nan)
