"""runners.regress on fabricated tables (plots._synthetic): the spread-aware SLOWER rule, correctness flips,
cross-GPU reports, commit mode, exit codes. In-process calls of main(); no GPU, no subprocess."""
import numpy as np
import pandas as pd
import pytest

from plots import _synthetic as S
from runners import tables as T
from runners.regression import measured as regress

SEQS, HEAD_DIMS, VARIANTS = (1024, 4096), (64, 128), ("two_pass", "atomic", "sdpa_flash")


def _table(**kwargs) -> pd.DataFrame:
    return S.table(seqs=SEQS, head_dims=HEAD_DIMS, variants=VARIANTS, failures=False, **kwargs)


def _slow(df: pd.DataFrame, factor: float, sel=None) -> pd.DataFrame:
    df = df.copy()
    sel = np.ones(len(df), bool) if sel is None else sel
    for col in ("tflops", "tflops_p20", "tflops_p80"):
        df.loc[sel, col] = df.loc[sel, col] * factor
    return df


def _point(df, variant="two_pass", seq=4096, head_dim=128, causal=False):
    return (df["variant"] == variant) & (df["seq"] == seq) & (df["head_dim"] == head_dim) & (df["causal"] == causal)


def _rows(out: str, verdict: str) -> list[str]:
    """Printed table rows with that verdict."""
    return [line for line in out.splitlines() if line.lstrip().startswith(verdict + " ")]


def _run(tmp_path, base, cand, *extra, per_row=False):
    S.write(base, tmp_path / "base")
    S.write(cand, tmp_path / "cand", per_row=per_row)  # per_row: the runner's layout, one file per point
    return regress.main([f"baseline={tmp_path / 'base'}", f"candidate={tmp_path / 'cand'}", *extra])


def test_20_percent_slowdown_is_flagged(tmp_path, capsys):
    base = _table()
    cand = _slow(base, 0.80, _point(base))
    assert _run(tmp_path, base, cand, per_row=True) == 1
    out = capsys.readouterr().out
    slower = _rows(out, "SLOWER")
    assert len(slower) == 1 and "two_pass" in slower[0] and "N4096 D128" in slower[0] and "0.800" in slower[0]
    assert "REGRESSED: 1 point(s)" in out


def test_2_percent_slowdown_within_noise_is_not_flagged(tmp_path, capsys):
    base = _table(spread=0.02)
    assert _run(tmp_path, base, _slow(base, 0.98)) == 0
    out = capsys.readouterr().out
    assert not _rows(out, "SLOWER") and "no regressions" in out
    assert len(_rows(out, "≈")) == len(base) and "0.980" in out  # a ratio row for every point  # the ratio table is printed for every point


def test_slowdown_past_threshold_but_inside_spread_is_reported_not_flagged(tmp_path, capsys):
    base = _table(spread=0.05)  # p20–p80 = ±5 %: a 7 % median slowdown overlaps the spread
    assert _run(tmp_path, base, _slow(base, 0.93, _point(base))) == 0
    out = capsys.readouterr().out
    assert len(_rows(out, "slower (within noise)")) == 1 and not _rows(out, "SLOWER")


def test_threshold_argument_is_applied(tmp_path):
    base = _table(spread=0.01)
    cand = _slow(base, 0.90, _point(base))
    assert _run(tmp_path, base, cand) == 1  # 10 % slower, default threshold 5 %
    assert _run(tmp_path, base, cand, "threshold=0.2") == 0


def test_rule_uses_candidate_optimistic_end_and_baseline_pessimistic_end():
    base = T.normalize(_table(spread=0.0))
    # The candidate's median is 20 % slower, but its p80 reaches the baseline: not beyond the spread.
    cand = _slow(base, 0.80)
    cand["tflops_p80"] = base["tflops"] * 0.99
    cmp = regress.compare(base, T.normalize(cand), 0.05)
    assert not cmp.regressed and set(cmp.table["verdict"]) == {"slower (within noise)"}
    # Wide baseline spread on one side only: the baseline's p20 decides.
    base2 = base.copy()
    base2["tflops_p20"] = base2["tflops"] * 0.80
    cmp = regress.compare(base2, T.normalize(_slow(base, 0.80)), 0.05)
    assert not cmp.regressed


def test_wrong_point_is_reported_and_exits_1_whatever_the_speed(tmp_path, capsys):
    base = _table()
    cand = _slow(base, 1.5)  # everything much faster ...
    sel = _point(cand, "atomic", 1024, 64, True)
    cand.loc[sel, "status"], cand.loc[sel, "correct"] = "wrong", False  # ... but one point is wrong
    assert _run(tmp_path, base, cand) == 1
    out = capsys.readouterr().out
    wrong = _rows(out, "WRONG")
    assert len(wrong) == 1 and "atomic" in wrong[0] and "N1024 D64 causal" in wrong[0]


def test_ok_but_incorrect_counts_as_wrong(tmp_path, capsys):
    base = _table()
    cand = base.copy()
    cand.loc[_point(cand), "correct"] = False  # status still "ok": not a result
    assert _run(tmp_path, base, cand) == 1
    assert "ok but incorrect" in capsys.readouterr().out


def test_ok_to_oom_is_a_regression(tmp_path, capsys):
    base = _table()
    cand = base.copy()
    cand.loc[_point(cand), "status"] = "oom"
    cand.loc[_point(cand), "correct"] = False
    assert _run(tmp_path, base, cand) == 1
    assert "BROKE" in capsys.readouterr().out


def _skip(df: pd.DataFrame, sel) -> pd.DataFrame:
    """Those points as the CPU interpreter's over-budget rows: status skipped, no result, no timings."""
    df = df.assign(correct=df["correct"].astype(object))
    df.loc[sel, "status"], df.loc[sel, "correct"] = "skipped", None
    for col in ("tflops", "tflops_p20", "tflops_p80", "ms", "ms_p20", "ms_p80"):
        df.loc[sel, col] = np.nan
    return df


def test_skipped_points_are_their_own_count_never_failing(tmp_path, capsys):
    """A skipped row (not run: over cpu_budget_s) is not a failure: on both sides it is `skipped`, not "still
    failing"; an ok point skipped in the candidate is not BROKE, a skipped one run later is not "fixed"."""
    base = _table()
    both, later, earlier = _point(base, seq=4096), _point(base, seq=1024, head_dim=64), _point(base, seq=1024)
    base = _skip(base, both | earlier)
    cand = _skip(base, both | later)
    cand.loc[earlier] = _table().loc[earlier]  # run in the candidate: ok and correct
    assert _run(tmp_path, base, cand) == 0
    out = capsys.readouterr().out
    skipped = int((both | later | earlier).sum())
    assert f"{skipped} skipped" in out and "still failing" not in out and "no regressions" in out
    assert not _rows(out, "BROKE") and not _rows(out, "fixed")


def test_point_wrong_on_both_sides_is_reported_not_counted(tmp_path, capsys):
    base = _table()
    for df in (base,):
        df.loc[_point(df), "status"], df.loc[_point(df), "correct"] = "wrong", False
    assert _run(tmp_path, base, base.copy()) == 0
    assert "still wrong" in capsys.readouterr().out


def test_cross_gpu_reports_ratios_and_does_not_flag(tmp_path, capsys):
    base = _table(gpu_name="FAKE-GPU-A 80GB")
    cand = _table(gpu_name="FAKE-GPU-B 141GB", speed=0.5)  # half the speed on the other GPU
    assert _run(tmp_path, base, cand) == 0  # automatic: no gpu_name in common
    out = capsys.readouterr().out
    assert "cross-GPU" in out and not _rows(out, "SLOWER") and "no regressions" in out
    assert "FAKE-GPU-A 80GB → FAKE-GPU-B 141GB" in out and "0.500" in out
    # forced on, same effect; forced off joins on (config_key, gpu_name): nothing in common, nothing compared
    assert _run(tmp_path, base, cand, "cross_gpu=true") == 0
    assert _run(tmp_path, base, cand, "cross_gpu=false") == 2
    assert "no point compared" in capsys.readouterr().err


def test_cross_gpu_oom_is_reported_but_wrong_gradients_still_count(tmp_path, capsys):
    base = _table(gpu_name="FAKE-GPU-A")
    cand = _table(gpu_name="FAKE-GPU-B")
    cand.loc[_point(cand), "status"] = "oom"
    assert _run(tmp_path, base, cand) == 0
    assert "fails on candidate GPU" in capsys.readouterr().out
    sel = _point(cand, "atomic", 1024)
    cand.loc[sel, "status"], cand.loc[sel, "correct"] = "wrong", False
    assert _run(tmp_path, base, cand) == 1


def test_newest_row_of_a_config_is_the_one_compared(tmp_path):
    base = _table()
    old_slow = _slow(base, 0.5).assign(timestamp="2025-01-01T00:00:00Z")
    new_fast = base.assign(timestamp="2025-03-01T00:00:00Z")
    assert _run(tmp_path, base, pd.concat([new_fast, old_slow])) == 0
    assert _run(tmp_path, base, pd.concat([old_slow.assign(timestamp="2025-04-01T00:00:00Z"), new_fast])) == 1


def test_untimed_rows_are_never_speed_flagged(tmp_path, capsys):
    base = _table(device="cpu-interpreter", gpu_name="cpu-interpreter", timing_meaningful=False)
    assert _run(tmp_path, base, _slow(base, 0.3)) == 0
    assert "untimed" in capsys.readouterr().out


@pytest.mark.parametrize("side", ["candidate", "baseline"])
def test_correct_point_without_tflops_is_labelled_not_dropped(side, tmp_path, capsys):
    """An ok, correct row whose tflops is NaN cannot be compared: its own verdict 'no tflops', counted in the
    summary and printed, never '≈' and never a regression."""
    base = _table()
    gap = base.assign(tflops=base["tflops"].where(~_point(base), np.nan))
    assert _run(tmp_path, *((base, gap) if side == "candidate" else (gap, base))) == 0
    out = capsys.readouterr().out
    rows = _rows(out, "no tflops")
    assert len(rows) == 1 and "two_pass" in rows[0] and "N4096 D128" in rows[0], out
    assert "1 no tflops" in out and "no regressions" in out
    assert len(_rows(out, "≈")) == len(base) - 1


def test_commit_mode_compares_that_commit_with_the_newest_other(tmp_path, capsys):
    old = _table(commit="abc1234" + "0" * 33, timestamp="2025-01-01T00:00:00Z")
    mid = _slow(_table(commit="bcd2345" + "0" * 33, timestamp="2025-02-01T00:00:00Z"), 0.7)
    new = _table(commit="cde3456" + "0" * 33, timestamp="2025-03-01T00:00:00Z")
    S.write(pd.concat([old, mid, new]), tmp_path / "hist", per_row=True)
    assert regress.main(["baseline=abc1234", f"results={tmp_path / 'hist'}"]) == 0  # vs cde3456: same speed
    out = capsys.readouterr().out
    assert "commit abc1234" in out and "newest commit cde3456" in out
    assert regress.main(["baseline=cde3456", f"results={tmp_path / 'hist'}"]) == 1  # newest other: bcd2345, slower
    assert "newest commit bcd2345" in capsys.readouterr().out


def test_commit_mode_skips_a_newer_commit_that_measured_other_points(tmp_path, capsys):
    """A newer commit whose rows are another study (other shapes) in the same folder is not the candidate: the newest
    commit that measured one of the baseline's points is (the docs' `baseline=596eaf1 results=results/h200` once a
    window/softcap table landed there)."""
    old = _table(commit="abc1234" + "0" * 33, timestamp="2025-01-01T00:00:00Z")
    mid = _slow(_table(commit="bcd2345" + "0" * 33, timestamp="2025-02-01T00:00:00Z"), 0.7)
    probe = S.table(seqs=(2048,), head_dims=HEAD_DIMS, variants=VARIANTS, failures=False,
                    commit="cde3456" + "0" * 33, timestamp="2025-03-01T00:00:00Z")  # other shapes only
    S.write(pd.concat([old, mid, probe]), tmp_path / "hist", per_row=True)
    assert regress.main(["baseline=abc1234", f"results={tmp_path / 'hist'}"]) == 1  # vs bcd2345: slower
    out = capsys.readouterr().out
    assert "newest commit bcd2345" in out and "cde3456" not in out


def test_commit_mode_errors_are_one_line_exit_2(tmp_path, capsys):
    S.write(_table(commit="abc1234" + "0" * 33), tmp_path / "hist")
    assert regress.main(["baseline=fff999", f"results={tmp_path / 'hist'}"]) == 2
    err = capsys.readouterr().err
    assert "no rows of commit fff999" in err and len(err.strip().splitlines()) == 1
    assert regress.main(["baseline=abc1234", f"results={tmp_path / 'hist'}"]) == 2  # no other commit
    assert regress.main(["baseline=not/a/path/or/ref", f"results={tmp_path / 'hist'}"]) == 2


def test_no_point_compared_is_one_line_exit_2(tmp_path, capsys):
    """Sides that share no point (the docs' old `baseline=cdcb3b3 results=results/h200`: 0 points in both tables)
    compare nothing: one line saying so, exit 2 (nothing compared, as the runner's 2 is nothing measured), never
    "no regressions" and 0."""
    base = _table()
    cand = S.table(seqs=(2048,), head_dims=HEAD_DIMS, variants=VARIANTS, failures=False)  # other shapes only
    assert _run(tmp_path, base, cand) == 2
    captured = capsys.readouterr()
    assert "no regressions" not in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "no point compared" in err[0] and f"({len(base)} rows" in err[0]


@pytest.mark.parametrize("argv", [["candidate=x"], ["baseline=.", "threshold=lots"], ["baseline=.", "color=red"],
                                  ["positional"]])
def test_bad_arguments_exit_2(argv, capsys):
    assert regress.main(argv) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_out_writes_markdown(tmp_path):
    base = _table()
    assert _run(tmp_path, base, _slow(base, 0.8, _point(base)), f"out={tmp_path / 'r' / 'regress.md'}") == 1
    text = (tmp_path / "r" / "regress.md").read_text()
    assert text.startswith("# Regression check") and "| SLOWER | two_pass |" in text


# ------------------------------------------------------------------------------- cross-GPU: per shape
def test_cross_gpu_compares_each_sides_best_config_per_shape(tmp_path, capsys):
    """Block defaults differ per GPU: no config key is shared, yet every shape is compared, each side at its
    fastest correct config."""
    base = _table(gpu_name="FAKE-GPU-A")
    cand_blocks = {"two_pass": {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32},
                   "atomic": {"BLOCK_M": 32, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3}}
    fast = pd.concat([pd.DataFrame([S.row(v, s, d, c, gpu_name="FAKE-GPU-B", blocks=cand_blocks.get(v), speed=1.5)
                                    for v in VARIANTS for s in SEQS for d in HEAD_DIMS for c in (False, True)])])
    slow = _table(gpu_name="FAKE-GPU-B", speed=0.5)  # the GPU-A configs, slower on B: not the best there
    cand = pd.concat([slow, fast], ignore_index=True)
    cmp = regress.compare(T.normalize(base), T.normalize(cand))
    assert cmp.cross_gpu
    n_shapes = len(VARIANTS) * len(SEQS) * len(HEAD_DIMS) * 2
    assert cmp.counts.get("compared") == n_shapes and cmp.n_both == n_shapes
    assert not cmp.counts.get("missing in candidate") and not cmp.counts.get("new")
    two_pass = cmp.table[cmp.table["variant"] == "two_pass"]
    assert (two_pass["BLOCK_M1_c"] == 32).all() and (two_pass["BLOCK_M1_b"] == 64).all()  # each side's best
    triton = cmp.table["variant"].isin(("two_pass", "atomic"))
    assert (cmp.table.loc[triton, "n_configs_c"] == 2).all()  # sdpa_flash: one config (no blocks), the newest
    assert _run(tmp_path, base, cand) == 0
    out = capsys.readouterr().out
    assert "per shape" in out and "M1=64 N1=64 M2=64 N2=64 w4 s2" in out and "→ M1=32 N1=128 M2=128 N2=32" in out


def test_cross_gpu_wrong_config_of_a_shape_counts_even_next_to_a_correct_one(tmp_path, capsys):
    base = _table(gpu_name="FAKE-GPU-A")
    extra = S.row("two_pass", 4096, 128, False, gpu_name="FAKE-GPU-B", status="wrong", correct=False,
                  blocks={"BLOCK_M1": 128, "BLOCK_N1": 128, "BLOCK_M2": 64, "BLOCK_N2": 64})
    cand = pd.concat([_table(gpu_name="FAKE-GPU-B"), pd.DataFrame([extra])], ignore_index=True)
    assert _run(tmp_path, base, cand) == 1
    wrong = _rows(capsys.readouterr().out, "WRONG")
    assert len(wrong) == 1 and "two_pass" in wrong[0] and "N4096 D128" in wrong[0]


# --------------------------------------------------------------------- joins that survive schema growth
def test_join_key_drops_fields_at_their_declared_default():
    shape = dict(batch=4, heads=16, kv_heads=16, seq=4096, seq_k=4096, head_dim=128, causal=True, layout="bnhd")
    blocks = {"BLOCK_M1": 64, "BLOCK_N1": 128, "num_warps1": 4, "num_stages1": 2, "BLOCK_M2": 64, "BLOCK_N2": 64,
              "num_warps2": 8, "num_stages2": 2}
    old = T.join_key("two_pass", shape, "bf16", blocks, "do_bench")
    new = T.join_key("two_pass", shape, "bf16", {**blocks, "longest_first": False, "prescale": False}, "do_bench")
    assert old == new and "BLOCK_N1=128" in old and "num_warps2=8" in old and "BLOCK_M1" not in old
    assert T.join_key("two_pass", shape, "bf16", {**blocks, "prescale": True}, "do_bench") != old
    assert T.join_key("two_pass", shape, "bf16", blocks, "do_bench_cudagraph") != old
