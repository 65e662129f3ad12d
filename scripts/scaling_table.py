"""The table of scripts/gpu_scaling.sh: one line per run (n GPUs), from this call's runs and an earlier call's
(--previous: the one-GPU run in one device call, the 2/4-GPU runs in another), with each run's phases from its phase
log (runners/phases.py): the fixed phases and the point phase, and both against the one-GPU run's.

    python scripts/scaling_table.py --work W --out O --gpu h200 --rep-ms 10000 --variants V [--previous P] n:rc:t0:t1 ...

Each run of this call is appended to O/<gpu>_scaling_runs.jsonl (with P's runs first, when given) and its rows copied
to O/<gpu>_scaling_rows_gpus<n>.parquet; the table is O/<gpu>_scaling.parquet and .md. Exit 0 when every check passes:
each run exit 0, every point ok and once, GPU indices 0..n-1, the same sweep in every run, wall time <= the limit."""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

from runners import phases  # noqa: E402
from runners.tables import results  # noqa: E402
from runners.tables.markdown import markdown_table  # noqa: E402

LIMITS = {2: 0.6, 4: 0.35, 8: 0.2}  # wall time against one GPU's (issues 39, 46)
PHASES = ("preflight", "launch", "to_first_point", "points", "tail", "exit", "fixed", "job_start", "worker_start")


def run_record(work: Path, out: Path, gpu: str, spec: str, rep_ms: int, variants: str) -> dict:
    """One run of this call (`n:rc:t0:t1`): its numbers and phases; its rows copied into `out`."""
    n, rc, t0, t1 = spec.split(":")
    n, rc, wall = int(n), int(rc), float(t1) - float(t0)
    rows_file = f"{gpu}_scaling_rows_gpus{n}.parquet"
    try:
        df = results.load(work / f"results-gpus{n}")
    except Exception:  # noqa: BLE001 - no rows at all (the run died): an empty run, which fails its check
        df = pd.DataFrame({"config_key": [], "status": [], "gpu_index": []})
    df.assign(n_gpus=n).to_parquet(out / rows_file, index=False)
    log = out / f"{gpu}_scaling_gpus{n}.phases.jsonl"
    summary = phases.summary(phases.read(log), start=float(t0), end=float(t1)) if log.is_file() and log.stat().st_size else {}
    return {"gpu": gpu, "n_gpus": n, "exit_status": rc, "wall_s": round(wall, 1), "rep_ms": int(rep_ms),
            "variants": variants, "rows_file": rows_file, "phases": {k: summary.get(k) for k in PHASES}}


def load_runs(folder: Path, gpu: str) -> list[dict]:
    path = folder / f"{gpu}_scaling_runs.jsonl"
    if not path.is_file():
        return []
    return [{**json.loads(line), "folder": str(folder)} for line in path.read_text().splitlines() if line.strip()]


def table(runs: list[dict]) -> tuple[pd.DataFrame, list[tuple[bool, str]]]:
    """The table (one line per run, the latest run of each GPU count) and the checks."""
    latest = {r["n_gpus"]: r for r in runs}
    lines, checks = [], []
    sweeps = {(r["gpu"], r["rep_ms"], r["variants"]) for r in latest.values()}
    if len(sweeps) > 1:
        checks.append((False, f"the runs measured different sweeps (gpu, rep_ms, variants): {sorted(sweeps)}"))
    for n in sorted(latest):
        r = latest[n]
        df = pd.read_parquet(Path(r["folder"]) / r["rows_file"])
        ph = r["phases"]
        lines.append({"gpu": r["gpu"], "n_gpus": n, "exit_status": r["exit_status"], "points": len(df),
                      "wall_s": r["wall_s"], "points_per_min": round(len(df) / r["wall_s"] * 60, 2) if r["wall_s"] else 0,
                      "ok_share": round(float((df.status == "ok").mean()), 3) if len(df) else 0.0,
                      "gpu_indices": ",".join(str(int(i)) for i in sorted(df.gpu_index.dropna().unique())),
                      "each_point_once": bool(df.config_key.is_unique),
                      **{f"{k}_s": ph.get(k) for k in PHASES}})
    t = pd.DataFrame(lines)
    if t.empty:
        return t, checks + [(False, "no run")]
    one = t[t.n_gpus == 1]
    nan = float("nan")
    t["wall_vs_1_gpu"] = (t.wall_s / one.wall_s.iloc[0]).round(3) if len(one) else nan
    t["points_vs_1_gpu"] = (t.points_s / one.points_s.iloc[0]).round(3) if len(one) and one.points_s.iloc[0] else nan
    t["limit"] = t.n_gpus.map(LIMITS)
    for r in t.itertuples():
        checks.append((r.exit_status == 0 and r.ok_share == 1.0 and r.each_point_once
                       and r.gpu_indices == ",".join(map(str, range(r.n_gpus))),
                       f"{r.n_gpus} GPU(s): exit {r.exit_status}, every point ok and once, GPU indices {r.gpu_indices}"))
        if r.n_gpus in LIMITS:
            checks.append((bool(r.wall_vs_1_gpu <= LIMITS[r.n_gpus]),
                           f"{r.n_gpus} GPUs: wall {r.wall_vs_1_gpu:.3f}x one GPU's (limit {LIMITS[r.n_gpus]}x)"))
    return t, checks


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gpu", required=True)
    p.add_argument("--rep-ms", type=int, required=True)
    p.add_argument("--variants", required=True)
    p.add_argument("--previous", type=Path)
    p.add_argument("runs", nargs="*")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    previous = load_runs(a.previous, a.gpu) if a.previous else []
    here = [run_record(a.work, a.out, a.gpu, spec, a.rep_ms, a.variants) for spec in a.runs]
    with open(a.out / f"{a.gpu}_scaling_runs.jsonl", "w") as f:
        for r in previous + here:
            f.write(json.dumps({k: v for k, v in r.items() if k != "folder"}) + "\n")
    for r in previous:  # the earlier call's rows next to this call's: the folder holds the whole table
        src = Path(r["folder"]) / r["rows_file"]
        if src.resolve() != (a.out / r["rows_file"]).resolve():
            (a.out / r["rows_file"]).write_bytes(src.read_bytes())
    t, checks = table([{**r, "folder": str(a.out)} for r in previous + here])
    t.to_parquet(a.out / f"{a.gpu}_scaling.parquet", index=False)
    (a.out / f"{a.gpu}_scaling.md").write_text(markdown_table(t) + "\n")
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(t.to_string(index=False))
    for ok, text in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {text}")
    print(f"{sum(ok for ok, _ in checks)} passed, {sum(not ok for ok, _ in checks)} failed")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
