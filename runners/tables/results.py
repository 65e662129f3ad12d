"""Result rows on disk: one small parquet file per finished point, append-only; load, dedupe, resume, summary.

Layout: <results_dir>/<gpu>/<sweep_id>/<point index>-<resume key>.parquet. A file is written under a
temporary name and linked into place, so a killed sweep leaves every finished row and no partial file,
and an existing file is never overwritten; a write that fails (a full disk) removes its temporary file.
"""
import hashlib
import json
import os
import re
import sys
import warnings
from pathlib import Path

import pandas as pd

from runners.tables import claims

# Statuses that a rerun would reproduce: resume skips them. oom, error, crashed and timeout may be transient: rerun.
# skipped (over the CPU budget, runners/point/cpu_cost.py) is estimated again, so a larger cpu_budget_s runs the point.
RESUME_STATUSES = ("ok", "wrong", "unsupported", "compile_error", "resources")
CONFIG_COLUMNS = ("variant", "batch", "heads", "kv_heads", "seq", "seq_k", "head_dim", "causal", "dtype", "layout",
                  "timed")  # timed: backward / forward / train (issue 42); a pivot's index only where it varies
DEDUPE_KEY = ("config_key", "gpu_name", "commit")

_session_paths: list[Path] = []  # rows written or found (resume) by this process, for the multirun summary
_session_found: list[Path] = []  # the ones of them that resume found already on disk


def resume_key(config_key: str, gpu_name: str, commit: str, diff_hash: str = "") -> str:
    """Short hash naming a measurement of config_key on one GPU at one code state (file name suffix)."""
    text = json.dumps([config_key, gpu_name, commit, diff_hash])
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def point_dir(results_dir: str | Path, gpu: str, sweep_id: str) -> Path:
    return Path(results_dir) / gpu / sweep_id


def write_row(row: dict, directory: Path, index: int, key: str) -> Path:
    """Writes one row as <index>-<key>.parquet (or -1, -2, ... if taken); never overwrites."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{index:05d}-{key}"
    tmp = directory / f".{stem}.{os.getpid()}.tmp"
    try:  # a write that fails (a full disk) leaves no partial temporary file
        pd.DataFrame([row]).to_parquet(tmp, index=False)
        for n in range(10_000):
            path = directory / (f"{stem}.parquet" if n == 0 else f"{stem}-{n}.parquet")
            try:
                os.link(tmp, path)  # atomic, fails if the name exists
            except FileExistsError:
                continue
            except OSError:  # file systems without hard links
                if path.exists():
                    continue
                os.replace(tmp, path)
            _session_paths.append(path)
            return path
        raise FileExistsError(f"no free file name for {stem} in {directory}")
    finally:
        tmp.unlink(missing_ok=True)
        claims.release(key)  # the point's claim (find_done), written or not


def find_done(results_dir: str | Path, gpu: str, key: str) -> tuple[Path, dict] | None:
    """The latest recorded row for resume key `key` whose status a rerun would reproduce, else None, and then
    the point is claimed for this process (runners/tables/claims.py; write_row releases it). While another
    process holds the claim this waits; the row that process wrote meanwhile, whatever its status, is returned
    as found (measured by another sweep). A process measures one point at a time: a claim it still holds
    (a point that ended without a row) is released here."""
    claims.release_all()
    base = Path(results_dir) / gpu
    before = _rows_of(base, key)
    done = _latest(before.items(), RESUME_STATUSES)
    if done is None:
        claims.claim(base, key)
        done = _latest((item for item in _rows_of(base, key).items() if item[0] not in before), None)
        if done is None:
            return None  # claimed: this process measures the point
        claims.release(key)
    path, row = done
    _session_paths.append(path)
    _session_found.append(path)
    return path, row


def _rows_of(base: Path, key: str) -> dict[Path, dict | None]:
    """{file: its last row (None when unreadable)} of every row file of resume key `key` under base."""
    rows = {}
    for path in base.rglob(f"*-{key}*.parquet") if base.is_dir() else ():
        try:
            rows[path] = pd.read_parquet(path).iloc[-1].to_dict()
        except Exception:  # noqa: BLE001 - an unreadable file is not a finished point
            rows[path] = None
    return rows


def _latest(items, statuses) -> tuple[Path, dict] | None:
    """(path, row) of the latest readable row by timestamp among (path, row) items, its status in `statuses`
    (None: any)."""
    found = [(str(row.get("timestamp", "")), path, row) for path, row in items
             if row is not None and (statuses is None or row.get("status") in statuses)]
    if not found:
        return None
    _, path, row = max(found, key=lambda item: item[0])
    return path, row


def session_paths() -> list[Path]:
    return list(_session_paths)


def session_found() -> list[Path]:
    """The rows of session_paths() that were already on disk (resume found them), not written now."""
    return list(_session_found)


def note_session(written=(), found=()) -> None:
    """Rows a job in another process wrote or found (a Slurm job's return value), for this process's summary."""
    _session_paths.extend(Path(p) for p in [*written, *found])
    _session_found.extend(Path(p) for p in found)


def reset_session() -> None:
    _session_paths.clear()
    _session_found.clear()


def concat_tables(tables: list) -> pd.DataFrame:
    import pyarrow as pa
    try:
        return pa.concat_tables(tables, promote_options="permissive").to_pandas()
    except (TypeError, pa.ArrowInvalid, pa.ArrowTypeError):  # older pyarrow, or clashing types
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return pd.concat([t.to_pandas() for t in tables], ignore_index=True)


class TableError(ValueError):
    """A file that is not a readable result table; str() is one line that names the file."""


def unify_types(tables: dict, strict: bool) -> tuple[dict, list[str], list[str]]:
    """({file: pyarrow Table} with each column at one type, one line per file dropped, one line per column cast).
    A column whose types no permissive promotion joins (int64 in one file, string in another): strict ->
    TableError naming the column, its types and files (one line); else the clashing files' column is cast to the
    type most files have (ties: the first file's), and a file whose values do not convert is dropped."""
    import pyarrow as pa

    tables, problems, notes = dict(tables), [], []
    for column in dict.fromkeys(c for t in tables.values() for c in t.column_names):
        types = {name: t.schema.field(column).type for name, t in tables.items() if column in t.column_names}
        if _promotable(types.values()):
            continue
        kinds = list(types.values())
        target = max(dict.fromkeys(kinds), key=kinds.count)  # the most files' type; ties: the first file's
        usual = next(name for name, kind in types.items() if kind == target)
        clash = [name for name, kind in types.items() if not _promotable((kind, target))]
        if strict:
            more = f" (and {len(clash) - 1} more file(s))" if len(clash) > 1 else ""
            raise TableError(f"column {column!r} has clashing types: {target} in {usual}, {types[clash[0]]} in "
                             f"{clash[0]}{more}")
        for name in clash:
            table = tables[name]
            try:
                cast = table.column(column).cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                problems.append(f"{name}: column {column!r} is {types[name]}, not {target} as in {usual}, and its "
                                "values do not convert")
                del tables[name]
                continue
            tables[name] = table.set_column(table.schema.get_field_index(column), column, cast)
            notes.append(f"coerced column {column!r} of {name} from {types[name]} to {target} (as in {usual})")
    return tables, problems, notes


def _promotable(types) -> bool:
    """Whether pyarrow's permissive promotion joins these types (int64 and double: yes; int64 and string: no)."""
    import pyarrow as pa
    try:
        pa.unify_schemas([pa.schema([("c", kind)]) for kind in types], promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return False
    return True


# Every row runners.sweep writes has these; without them a reader would have to guess (a missing `correct`
# would read as wrong gradients, a missing key would merge unrelated points): such a file is refused.
REQUIRED_COLUMNS = ("config_key", "variant", "status", "correct", "gpu_name", "commit", "timestamp")


def parquet_files(paths: list) -> list[Path]:
    """Every *.parquet entry of the paths: a file as given, a directory searched recursively. Entries that
    are not regular files (a directory named x.parquet inside a tree, a broken link) are kept: reading
    them names the problem. The runner writes only regular files."""
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.rglob("*.parquet")))
        elif p.exists() or p.is_symlink():
            files.append(p)
        else:
            raise FileNotFoundError(f"no results at {p}")
    return files


def read_table(path: Path):
    """One result file as a pyarrow Table; TableError (one line naming the file) when it is not one."""
    import pyarrow.parquet as pq

    try:
        if not path.is_file():
            what = "a directory" if path.is_dir() else "a broken link or special file"
            raise TableError(f"{path}: not a regular file ({what})")
        if path.stat().st_size == 0:
            raise TableError(f"{path}: empty file (0 bytes), not a parquet table")
        table = pq.read_table(path)
    except TableError:
        raise
    except PermissionError:
        raise TableError(f"{path}: permission denied") from None
    except Exception as exc:  # noqa: BLE001 - pyarrow's ArrowInvalid / OSError for truncated or foreign files
        text = " ".join(str(exc).split()) or type(exc).__name__
        text = re.sub(r"^Could not open Parquet input source '[^']*': ", "", text)
        raise TableError(f"{path}: not a readable parquet table ({text[:200]})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise TableError(f"{path}: not a flash-bwd result table (missing column(s) {', '.join(missing)})")
    return table


def read_tables(path: str | Path | list, strict: bool = False) -> tuple[pd.DataFrame, list[str], list[str]]:
    """(every row of the readable files, one line per file that is not a result table, one line per column
    coerced: unify_types). Never raises for a bad file unless strict; FileNotFoundError for a path that does
    not exist."""
    paths = path if isinstance(path, (list, tuple)) else [path]
    return read_files(parquet_files(paths), strict)


def read_files(files: list[Path], strict: bool) -> tuple[pd.DataFrame, list[str], list[str]]:
    """read_tables of these files; strict: TableError for the first bad file or clashing column type."""
    tables, problems = {}, []
    for f in files:
        try:
            tables[str(f)] = read_table(f)
        except TableError as exc:
            problems.append(str(exc))
    if problems and strict:
        more = f" (and {len(problems) - 1} more bad file(s))" if len(problems) > 1 else ""
        raise TableError(problems[0] + more)
    tables, dropped, notes = unify_types(tables, strict)
    rows = concat_tables(list(tables.values())) if tables else pd.DataFrame()
    return rows, problems + dropped, notes


def load(path: str | Path | list, strict: bool = True, warn=None) -> pd.DataFrame:
    """One DataFrame of every row: a parquet file, a directory (searched recursively), or a list of them.

    A file that is not a result table (truncated, another format renamed .parquet, empty, unreadable,
    missing a column of REQUIRED_COLUMNS): strict -> TableError naming it (one line); strict=False ->
    skipped, with one line per file passed to `warn` (default: "warning: skipped ..." on stderr). A column whose
    type clashes between files (unify_types): strict -> TableError; strict=False -> cast, one "warning: coerced
    ..." line each, and a file whose values do not convert is skipped."""
    df, problems, notes = read_tables(path, strict)
    for problem in problems:
        (warn or _warn_stderr)(f"warning: skipped {problem}")
    for note in notes:
        (warn or _warn_stderr)(f"warning: {note}")
    return df


def _warn_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def dedupe(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (config_key, gpu_name, commit): the latest by timestamp (merging tables from many machines)."""
    if df.empty:
        return df
    return (df.sort_values("timestamp", kind="stable")
              .drop_duplicates(subset=list(DEDUPE_KEY), keep="last")
              .reset_index(drop=True))


def _cell(row) -> str:
    if row["status"] != "ok":
        return row["status"]
    if not row.get("timing_meaningful", True):
        return f"{row['ms']:.3g} ms"
    value = row["tflops"]
    return f"{value:.1f}" if value >= 1 else f"{value:.3g}"


def status_counts(df: pd.DataFrame) -> str:
    """' (3 ok, 1 crashed, 1 timeout)': the statuses of the latest row per point; '' when empty."""
    if df.empty or "status" not in df:
        return ""
    counts = dedupe(df)["status"].value_counts()
    return " (" + ", ".join(f"{n} {status}" for status, n in counts.items()) + ")"


FAULT_STATUSES = ("crashed", "timeout")  # = runners.point.measure.FAULT_STATUSES (results does not import measure)


def fault_lines(df: pd.DataFrame) -> list[str]:
    """One line per point whose latest row crashed or timed out: '<status>: <config_key>: <reason>'."""
    if df.empty or "status" not in df:
        return []
    latest = dedupe(df)
    bad = latest[latest["status"].isin(FAULT_STATUSES)]
    return [f"{r['status']}: {r.get('config_key', '?')}: {r.get('reason', '')}" for _, r in bad.iterrows()]


def summary_table(df: pd.DataFrame) -> str:
    """Compact pivot: one row per shape (and block config when one variant is searched), one column per
    variant; cells are TFLOPS for ok points (wall-clock ms under the CPU interpreter), else the status
    (a wrong point never shows a throughput)."""
    if df.empty:
        return "(no rows)"
    df = dedupe(df)
    if "timed" in df:  # rows before issue 42 time the backward
        df = df.assign(timed=df["timed"].where(df["timed"].notna() & (df["timed"] != ""), "backward"))
    block_cols = []
    if df["variant"].nunique() == 1 and "blocks_json" in df:
        block_cols = [c for c in json.loads(df["blocks_json"].iloc[0]) if c in df and df[c].nunique(dropna=False) > 1]
    index = [c for c in CONFIG_COLUMNS[1:] if c in df and df[c].nunique(dropna=False) > 1] + block_cols
    if not index:
        index = ["seq", "head_dim", "causal"]
    cells = df.assign(cell=df.apply(_cell, axis=1))
    table = cells.pivot_table(index=index, columns="variant", values="cell", aggfunc="last")
    table = table.reindex(columns=list(dict.fromkeys(df["variant"])))  # variants in run order
    text = table.astype(object).where(table.notna(), "").to_string()
    if "timing_meaningful" in df and not df["timing_meaningful"].fillna(False).astype(bool).any():
        text += "\n(CPU interpreter: wall-clock ms, not GPU timings; cells of ok points are ms, not TFLOPS)"
    return text
