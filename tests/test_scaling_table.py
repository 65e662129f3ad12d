"""scripts/scaling_table.py, the table of scripts/gpu_scaling.sh: the one-GPU run in one call and the 2/4-GPU runs in
another make one table; each run's phases (fixed vs points) come from its phase log; a different sweep, a missing
GPU index or a wall time over the limit is a FAIL."""
import json
import subprocess
import sys

import pandas as pd

from runners.point import env

SCRIPT = env.REPO / "scripts" / "scaling_table.py"


def fake_run(work, out, n, t0, fixed, points, gpus=None):
    """Rows of a 4-point run on n GPUs into work/results-gpus<n>, its phase log into out; its `n:rc:t0:t1`."""
    folder = work / f"results-gpus{n}" / "h200" / f"gpus{n}"
    folder.mkdir(parents=True)
    gpus = list(range(n)) if gpus is None else gpus
    pd.DataFrame({"config_key": [f"k{i}" for i in range(4)], "variant": "two_pass", "status": "ok", "correct": True,
                  "gpu_name": "NVIDIA H200", "commit": "c", "timestamp": "t",
                  "gpu_index": [gpus[i % len(gpus)] for i in range(4)]}).to_parquet(folder / "rows.parquet")
    first = t0 + fixed - 2.0  # the first point starts 2 s before the fixed time is over (the tail)
    records = [{"t": t0 + 1.0, "pid": 1, "step": "cli", "since_start_s": 1.0},
               {"t": t0 + 10.0, "pid": 1, "step": "preflight", "since_start_s": 10.0},
               {"t": t0 + 11.0, "pid": 1, "step": "launch", "since_start_s": 11.0},
               {"t": first, "pid": 2, "step": "point", "since_start_s": 5.0},
               {"t": first + points, "pid": 2, "step": "row", "since_start_s": 5.0 + points},
               {"t": first + points + 2.0, "pid": 1, "step": "done", "since_start_s": 0.0}]
    with open(out / f"h200_scaling_gpus{n}.phases.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    return f"{n}:0:{t0}:{first + points + 2.5}"


def table(work, out, runs, previous=None, rep_ms=10000):
    args = [sys.executable, str(SCRIPT), "--work", str(work), "--out", str(out), "--gpu", "h200", "--rep-ms",
            str(rep_ms), "--variants", "two_pass,atomic", *(["--previous", str(previous)] if previous else []), *runs]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=env.REPO)


def test_two_calls_make_one_table_with_the_phases(tmp_path):
    work, a, b = tmp_path / "work", tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    run = table(work, a, [fake_run(work, a, 1, 1000.0, fixed=30.0, points=330.0)])
    assert run.returncode == 0, run.stdout + run.stderr
    work2 = tmp_path / "work2"  # the second call: another machine, maybe
    run = table(work2, b, [fake_run(work2, b, 2, 2000.0, fixed=30.0, points=165.0),
                           fake_run(work2, b, 4, 3000.0, fixed=40.0, points=90.0)], previous=a)
    t = pd.read_parquet(b / "h200_scaling.parquet").set_index("n_gpus")
    assert list(t.index) == [1, 2, 4] and (b / "h200_scaling_rows_gpus1.parquet").is_file()
    assert t.loc[1, "fixed_s"] == 30.5 and t.loc[1, "points_s"] == 330.0 and t.loc[1, "preflight_s"] == 10.0
    assert t.loc[2, "points_vs_1_gpu"] == 0.5 and t.loc[4, "wall_vs_1_gpu"] == round(130.5 / 360.5, 3)
    assert "PASS: 2 GPUs: wall 0.542x" in run.stdout
    assert "FAIL: 4 GPUs: wall 0.362x one GPU's (limit 0.35x)" in run.stdout and run.returncode == 1
    assert "fixed_s" in (b / "h200_scaling.md").read_text()
    assert len((b / "h200_scaling_runs.jsonl").read_text().splitlines()) == 3


def test_another_sweep_or_a_missing_gpu_fails(tmp_path):
    work, a, b = tmp_path / "work", tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    assert table(work, a, [fake_run(work, a, 1, 1000.0, fixed=30.0, points=330.0)]).returncode == 0
    work2 = tmp_path / "work2"
    run = table(work2, b, [fake_run(work2, b, 2, 2000.0, fixed=30.0, points=100.0, gpus=[0])], previous=a,
                rep_ms=3000)
    assert run.returncode == 1
    assert "FAIL: the runs measured different sweeps" in run.stdout
    assert "FAIL: 2 GPU(s): exit 0, every point ok and once, GPU indices 0" in run.stdout
