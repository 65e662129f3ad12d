"""Rows on disk when sweeps share a results folder or the disk fills (issue 39): a point is claimed before it is
measured, so a second sweep of the same point waits for the first one's row and counts it as already on disk; a
claim dies with its process; a row write that fails leaves no temporary file. CPU interpreter, tiny fp16 points."""
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from runners.point import env
from runners.tables import results

pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")

ROW = {"config_key": "k", "variant": "two_pass", "status": "ok", "correct": True, "gpu_name": "g", "commit": "c",
       "timestamp": "2026-01-01T00:00:00"}

# Another process: claims the point through find_done (nothing recorded yet), says so, then writes its row when
# told to (a line on stdin) or exits without writing one (stdin closed).
CLAIMER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from runners.tables import results
    base, key = Path(sys.argv[1]), sys.argv[2]
    assert results.find_done(base.parent, base.name, key) is None
    print("claimed", flush=True)
    if sys.stdin.readline():
        print(results.write_row({ROW}, base / "other-sweep", 0, key), flush=True)
""").replace("{ROW}", repr(ROW))


def start_claimer(base, key) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", CLAIMER, str(base), key], cwd=env.REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.stdout.readline().strip() == "claimed"
    return proc


@pytest.fixture(autouse=True)
def fresh_session():
    results.reset_session()
    yield
    results.reset_session()


def test_a_point_claimed_elsewhere_waits_for_that_row_and_counts_it_found(tmp_path):
    base = tmp_path / "results" / "cpu"
    proc = start_claimer(base, "abc")
    proc.stdin.write("write\n")  # the other process writes its row while this one waits for the claim
    proc.stdin.flush()
    done = results.find_done(base.parent, base.name, "abc")
    assert proc.wait(timeout=60) == 0
    written = proc.stdout.read().strip()
    assert done is not None and str(done[0]) == written, (done, written)
    assert results.session_found() == [done[0]]
    assert list(base.rglob("*.parquet")) == [done[0]]
    assert not list(base.rglob(".claim*"))  # the claim file goes with the claim


def test_a_claim_dies_with_its_process(tmp_path):
    base = tmp_path / "results" / "cpu"
    proc = start_claimer(base, "abc")
    proc.stdin.close()  # the claimer exits without a row
    assert results.find_done(base.parent, base.name, "abc") is None  # claimed here now: measure it
    assert proc.wait(timeout=60) == 0
    path = results.write_row(ROW, base / "this-sweep", 0, "abc")
    assert results.find_done(base.parent, base.name, "abc") == (path, pd.read_parquet(path).iloc[-1].to_dict())
    assert not list(base.rglob(".claim*"))


def test_a_failed_row_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full_disk(df, path, **kwargs):
        with open(path, "wb") as f:  # half a row on disk, then the disk is full
            f.write(b"PAR1 half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full_disk)
    with pytest.raises(OSError, match="No space left"):
        results.write_row(ROW, tmp_path / "rows", 0, "abc")
    assert os.listdir(tmp_path / "rows") == []


def test_two_sweeps_of_one_point_at_once_measure_it_once(tmp_path):
    argv = [sys.executable, "-m", "runners.sweep", "-m", "seq=128", "batch=1", "heads=2", "head_dim=32",
            "dtype=fp16", "variant=two_pass", "sweep_id=twice", f"results_dir={tmp_path / 'results'}"]
    procs = [subprocess.Popen([*argv, f"hydra.sweep.dir={tmp_path / f'multirun{i}'}"], cwd=env.REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "TRITON_INTERPRET": "1"}) for i in range(2)]
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    summaries = sorted(line for out, _ in outs for line in out.splitlines() if line.startswith("sweep twice:"))
    assert summaries == ["sweep twice: 1 rows (1 already on disk, 0 new; 1 ok)", "sweep twice: 1 rows (1 ok)"], outs
    assert len(list((tmp_path / "results").rglob("*.parquet"))) == 1
    assert not list((tmp_path / "results").rglob(".claim*"))


def test_a_claim_left_without_a_row_is_released_by_the_next_point(tmp_path):
    base = tmp_path / "results" / "cpu"
    assert results.find_done(base.parent, base.name, "first") is None  # claimed; its row is never written
    assert results.find_done(base.parent, base.name, "second") is None
    assert [p.name for p in base.glob(".claim*")] == [".claim-second"]
    results.write_row(ROW, base / "rows", 1, "second")
    assert not list(base.glob(".claim*"))
