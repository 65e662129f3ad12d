"""runners.merge: result folders from many jobs and machines -> one table, each (config_key, gpu_name, commit)
exactly once, no key lost; runners.regress and the plots read the merged file."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from plots import _synthetic as S
from runners import sweep
from runners.point import env
from runners.tables import merge, results
from runners.regression import measured as regress

KEY = list(results.DEDUPE_KEY)
SEQS, HEAD_DIMS, VARIANTS = (1024, 4096), (64, 128), ("two_pass", "atomic", "sdpa_flash")


def machine(gpu_name: str, commit: str, timestamp: str, **kwargs) -> pd.DataFrame:
    return S.table(seqs=SEQS, head_dims=HEAD_DIMS, variants=VARIANTS, failures=False, gpu_name=gpu_name,
                   commit=commit, timestamp=timestamp, **kwargs)


def keys(df: pd.DataFrame) -> list[tuple]:
    return list(df[KEY].astype(str).itertuples(index=False, name=None))


@pytest.fixture
def two_machines(tmp_path):
    """Machine A: GPU A at commits c1 and c2. Machine B: GPU B at c2, plus a copy of A's c1 folder (exact
    copies) and a re-run of A's c2 rows (the same keys, later, slower)."""
    a_c1 = machine("FAKE-GPU-A", "c1" * 20, "2026-01-01T00:00:00Z")
    a_c2 = machine("FAKE-GPU-A", "c2" * 20, "2026-01-02T00:00:00Z")
    b_c2 = machine("FAKE-GPU-B", "c2" * 20, "2026-01-02T00:00:00Z", speed=0.5, peak_tflops=500.0)
    rerun = a_c2.assign(timestamp="2026-01-03T00:00:00Z", tflops=a_c2.tflops * 0.9)
    S.write(a_c1, tmp_path / "A" / "gpu-a" / "s1", per_row=True)  # the runner's layout: one file per point
    S.write(a_c2, tmp_path / "A" / "gpu-a" / "s2", per_row=True)
    S.write(b_c2, tmp_path / "B" / "gpu-b" / "s3", per_row=True)
    S.write(a_c1, tmp_path / "B" / "copied-from-A")  # one file holding the same rows
    S.write(rerun, tmp_path / "B" / "gpu-a" / "rerun", per_row=True)
    return {"a_c1": a_c1, "a_c2": a_c2, "b_c2": b_c2, "rerun": rerun}


def test_merge_keeps_each_key_once_and_loses_none(tmp_path, two_machines, capsys):
    out = tmp_path / "merged.parquet"
    assert merge.main([str(tmp_path / "A"), str(tmp_path / "B"), f"out={out}"]) == 0
    merged = pd.read_parquet(out)
    every = pd.concat(two_machines.values(), ignore_index=True)
    assert len(keys(merged)) == len(set(keys(merged)))  # no key twice
    assert set(keys(merged)) == set(keys(every))  # no key lost
    n = len(two_machines["a_c1"])
    assert len(merged) == 3 * n and len(every) == 4 * n  # a_c1 is on disk twice: 5n rows are read
    a_c2 = merged[(merged.gpu_name == "FAKE-GPU-A") & (merged.commit == "c2" * 20)]
    assert (a_c2.timestamp == "2026-01-03T00:00:00Z").all()  # the newest measurement kept
    np.testing.assert_allclose(np.sort(a_c2.tflops), np.sort(two_machines["rerun"].tflops))
    text = capsys.readouterr().out
    assert f"{5 * n} rows in -> {3 * n} rows out ({2 * n} duplicates dropped: {n} exact copies, {n} re-measured" in text
    assert "gpu_name=FAKE-GPU-B" in text and f"wrote {out}" in text


def test_merge_twice_and_into_an_input_folder(tmp_path, two_machines):
    out_dir = tmp_path / "A" / "merged"  # inside an input: the previous output is never read back
    assert merge.main([str(tmp_path / "A"), str(tmp_path / "B"), str(tmp_path / "B"), f"out={out_dir}"]) == 0
    first = pd.read_parquet(out_dir / merge.DEFAULT_NAME)
    assert merge.main([str(tmp_path / "A"), str(tmp_path / "B"), f"out={out_dir}"]) == 0
    second = pd.read_parquet(out_dir / merge.DEFAULT_NAME)
    assert len(first) == len(second) == 3 * len(two_machines["a_c1"])
    assert not list(out_dir.glob(".*tmp"))


def test_merged_table_feeds_regress_and_plots(tmp_path, two_machines, capsys):
    from plots import compare, cross_gpu

    out = tmp_path / "merged.parquet"
    merge.main([str(tmp_path / "A"), str(tmp_path / "B"), f"out={out}"])
    # commit mode on the merged table: c1 vs the newest other commit (c2), GPU A rows joined per GPU
    code = regress.main([f"baseline={'c1' * 20}", f"results={out}"])
    assert code == 0, capsys.readouterr()
    capsys.readouterr()
    assert compare.main([f"results={out}", f"out={tmp_path / 'plots'}", "gpu=FAKE-GPU-B"]) == 0
    assert cross_gpu.main([f"results={out}", f"out={tmp_path / 'plots'}"]) == 0
    pngs = list((tmp_path / "plots").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_remeasured_keep_drops_exact_copies_only(tmp_path, two_machines, capsys):
    """remeasured=keep (repeated runs of one point, a noise study): the copied folder's rows go, the re-run's stay
    beside the first measurement of their keys."""
    out = tmp_path / "all.parquet"
    assert merge.main([str(tmp_path / "A"), str(tmp_path / "B"), f"out={out}", "remeasured=keep"]) == 0
    merged = pd.read_parquet(out)
    n = len(two_machines["a_c1"])
    assert len(merged) == 4 * n and set(keys(merged)) == set(keys(pd.concat(two_machines.values())))
    a_c2 = merged[(merged.gpu_name == "FAKE-GPU-A") & (merged.commit == "c2" * 20)]
    assert sorted(a_c2.timestamp.unique()) == ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"]
    assert len(a_c2) == 2 * n and not merged[KEY + ["timestamp"]].astype(str).duplicated().any()
    text = capsys.readouterr().out
    assert f"{5 * n} rows in -> {4 * n} rows out ({n} exact copies dropped; {n} re-measurements kept" in text


@pytest.mark.parametrize("argv, message", [
    ([], "no inputs"), (["results"], "out="), (["/no/such/dir", "out=x.parquet"], "no results at"),
    (["results", "out=x.parquet", "remeasured=all"], "remeasured='all': expected keep or newest"),
])
def test_bad_arguments_exit_2(argv, message, capsys):
    assert merge.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_no_rows_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert merge.main([str(tmp_path / "empty"), f"out={tmp_path / 'm.parquet'}"]) == 2
    assert "no result rows" in capsys.readouterr().err


def clashing_files(tmp_path, seq_text: str) -> tuple[pd.DataFrame, Path]:
    """Two result files whose `seq` types clash: int64 in a.parquet, string (seq_text) in b.parquet."""
    rows = machine("FAKE-GPU-A", "c1" * 20, "2026-01-01T00:00:00Z")
    folder = tmp_path / "clash"
    folder.mkdir(parents=True)
    rows.iloc[1:].to_parquet(folder / "a.parquet", index=False)
    rows.iloc[:1].assign(seq=seq_text).to_parquet(folder / "b.parquet", index=False)
    return rows, folder


def test_conflicting_column_types_are_one_line_exit_2(tmp_path, capsys):
    _, folder = clashing_files(tmp_path, "1024")
    out = tmp_path / "m.parquet"
    assert merge.main([str(folder), f"out={out}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "column 'seq'" in err and "int64" in err and "string" in err and "a.parquet" in err and "b.parquet" in err
    assert not out.exists()


def test_conflicting_column_types_with_strict_false_are_coerced_and_said(tmp_path, capsys):
    rows, folder = clashing_files(tmp_path, "1024")
    out = tmp_path / "m.parquet"
    assert merge.main([str(folder), f"out={out}", "strict=false"]) == 0
    merged = pd.read_parquet(out)
    assert len(merged) == len(rows) and merged["seq"].dtype == "int64" and sorted(merged.seq) == sorted(rows.seq)
    err = capsys.readouterr().err
    assert "coerced column 'seq' of" in err and "b.parquet" in err and "string to int64" in err, err
    # a value that does not convert: that file is skipped and named, its row is not in the output
    _, folder = clashing_files(tmp_path / "bad", "n/a")
    assert merge.main([str(folder), f"out={out}", "strict=false"]) == 0
    assert len(pd.read_parquet(out)) == len(rows) - 1
    err = capsys.readouterr().err
    assert "skipped" in err and "b.parquet" in err and "column 'seq'" in err and "Traceback" not in err, err


@pytest.mark.skipif(not env.interpreting(), reason="runner rows on the CPU interpreter")
def test_runner_rows_from_two_machines(tmp_path):
    """Rows the runner wrote in two results folders (two machines with the same GPU model at one commit):
    the point measured on both is kept once, the newest."""
    from hydra import compose, initialize_config_dir

    tiny = ["head_dim=16", "batch=1", "heads=2", "dtype=fp32", "bench.cpu_warmup=0", "bench.cpu_rep=1",
            "variant=atomic", "blocks.BLOCK_M=16", "resume=false"]
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        for folder, seqs in (("m1", (17, 33)), ("m2", (33, 40))):
            for seq in seqs:
                cfg = compose("config", [*tiny, f"seq={seq}", f"results_dir={tmp_path / folder}", "sweep_id=s"])
                sweep.run_point(cfg, out=lambda _: None)
    out = tmp_path / "all.parquet"
    assert merge.main([str(tmp_path / "m1"), str(tmp_path / "m2"), f"out={out}"]) == 0
    merged = results.load(out)
    both = results.load([tmp_path / "m1", tmp_path / "m2"])
    assert len(both) == 4 and len(merged) == 3 and sorted(merged.seq) == [17, 33, 40]
    assert merged[merged.seq == 33].timestamp.iloc[0] == both[both.seq == 33].timestamp.max()
    assert {"gpu_index", "gpu_uuid", "cuda_visible_devices"} <= set(merged.columns)
