"""runners.regress on fabricated model-step rows (plots._synthetic.step_table, bench_kind=model_step): step time
compared per (model config, variant, compile mode, GPU) with the kernel rows' rule, the training-agreement gate's
wrong rows counted, and kernel rows in the same tables never joined with them. In-process calls of main()."""
import json

import numpy as np
import pandas as pd

from plots import _synthetic as S
from runners.regression import measured as regress
from runners import tables as T

HEADING = regress.STEP_HEADING


def _steps(**kwargs) -> pd.DataFrame:
    return S.step_table(failures=False, **kwargs)


def _slower(df: pd.DataFrame, factor: float, sel=None) -> pd.DataFrame:
    """Step times × ``factor`` (>1: slower) where ``sel``."""
    df = df.copy()
    sel = np.ones(len(df), bool) if sel is None else sel
    for col in ("ms", "ms_p20", "ms_p80"):
        df.loc[sel, col] = df.loc[sel, col] * factor
    return df


def _point(df, variant="two_pass", mode="default", model="gpt_d64"):
    return (df["variant"] == variant) & (df["compile_mode"] == mode) & (df["model"] == model)


def _rows(out: str, verdict: str) -> list[str]:
    return [line for line in out.splitlines() if line.lstrip().startswith(verdict + " ")]


def _run(tmp_path, base, cand, *extra):
    S.write(base, tmp_path / "base")
    S.write(cand, tmp_path / "cand", per_row=True)
    return regress.main([f"baseline={tmp_path / 'base'}", f"candidate={tmp_path / 'cand'}", *extra])


def test_planted_step_time_regression_is_flagged_for_its_mode_only(tmp_path, capsys):
    base = _steps()
    cand = _slower(base, 1.25, _point(base))  # two_pass compiled 25 % slower; its eager row is not
    assert _run(tmp_path, base, cand) == 1
    out = capsys.readouterr().out
    assert HEADING in out
    slower = _rows(out, "SLOWER")
    assert len(slower) == 1, out
    assert "two_pass" in slower[0] and "default" in slower[0] and "gpt_d64: L2 d256 H4/4 D64 B2 N4096" in slower[0]
    assert "0.800" in slower[0]  # base ms / cand ms
    eager = [line for line in _rows(out, "≈") if "two_pass" in line and "eager" in line and "gpt_d64" in line]
    assert len(eager) == 1  # eager and compiled rows of one design are two points, not one
    assert f"{len(base)} point(s) in both tables" in out and "REGRESSED: 1 point(s)" in out


def test_step_slowdown_inside_the_spread_is_not_flagged(tmp_path, capsys):
    base = _steps(spread=0.05)
    assert _run(tmp_path, base, _slower(base, 1.07, _point(base))) == 0  # 7 % slower, p20–p80 ±5 %: overlaps
    out = capsys.readouterr().out
    assert len(_rows(out, "slower (within noise)")) == 1 and not _rows(out, "SLOWER") and "no regressions" in out
    assert _run(tmp_path, base, _slower(base, 0.7, _point(base))) == 0  # faster is reported, never counted
    assert len(_rows(capsys.readouterr().out, "FASTER")) == 1


def test_agreement_gate_failure_counts_as_wrong_and_a_failed_step_as_broke(tmp_path, capsys):
    base = _steps()
    cand = base.copy()
    sel = _point(cand, "atomic", "eager", "gpt_d128")
    cand.loc[sel, "status"], cand.loc[sel, "correct"] = "wrong", False  # off the baseline's loss curve
    oom = _point(cand, "fused", "default", "gpt_d64")
    cand.loc[oom, "status"], cand.loc[oom, "correct"] = "oom", False
    cand.loc[oom, ["ms", "ms_p20", "ms_p80"]] = np.nan
    assert _run(tmp_path, base, cand) == 1
    out = capsys.readouterr().out
    wrong, broke = _rows(out, "WRONG"), _rows(out, "BROKE")
    assert len(wrong) == 1 and "atomic" in wrong[0] and "eager" in wrong[0] and "gpt_d128" in wrong[0]
    assert len(broke) == 1 and "fused" in broke[0] and "oom" in broke[0]
    assert "REGRESSED: 2 point(s)" in out


def test_wrong_on_both_sides_is_listed_not_counted(tmp_path, capsys):
    both = S.step_table()  # fused eager on gpt_d128 is wrong
    assert _run(tmp_path, both, both) == 0
    still = _rows(capsys.readouterr().out, "still wrong")
    assert len(still) == 1 and "fused" in still[0] and "gpt_d128" in still[0]


def test_kernel_and_step_rows_in_one_table_never_join(tmp_path, capsys):
    kernels = S.table(seqs=(4096,), head_dims=(64,), causals=(True,), variants=("two_pass", "sdpa_flash"),
                      failures=False, batch=2, heads=4)  # the same attention shape as a gpt_d64 layer
    kernels["layout"] = "bnhd"
    base = pd.concat([kernels, _steps()], ignore_index=True)
    cand = pd.concat([kernels, _slower(_steps(), 1.25, _point(_steps()))], ignore_index=True)
    cand.loc[:len(kernels) - 1, ["tflops", "tflops_p20", "tflops_p80"]] *= 0.75  # the kernels 25 % slower too
    assert _run(tmp_path, base, cand, f"out={tmp_path / 'r.md'}") == 1
    out = capsys.readouterr().out
    kernel_table, step_table = out.split(HEADING)
    assert len(_rows(kernel_table, "SLOWER")) == len(kernels) and "TFLOPS" in kernel_table
    assert len(_rows(step_table, "SLOWER")) == 1 and "model-step" in out
    assert f"{len(base)} point(s) in both tables" in out  # one point per row: nothing collapsed or cross-joined
    md = (tmp_path / "r.md").read_text()
    assert HEADING in md and "candidate step ms" in md and "candidate TFLOPS" in md


def test_step_join_key_is_the_config_less_the_timing_knobs():
    row = S.step_row("two_pass", "eager")
    config = json.loads(row["config_key"])
    retimed = {**config, "rep": 50, "warmup": 10}  # timed longer: still the same point
    assert T.step_join_key(json.dumps(retimed)) == T.step_join_key(row["config_key"])
    for key, value in (("seq", 16384), ("compile_mode", "default"), ("steps", 50), ("variant", "atomic")):
        assert T.step_join_key(json.dumps({**config, key: value})) != T.step_join_key(row["config_key"]), key
    df = T.normalize(pd.concat([pd.DataFrame([row]), S.table(seqs=(4096,), head_dims=(64,), failures=False)]))
    assert df["join_key"].str.startswith("model_step|").sum() == 1
    assert df.loc[T.is_model_step(df), "BLOCK_M1"].isna().all()  # no block defaults filled into a model step


def test_commit_mode_on_step_rows(tmp_path, capsys):
    old = _steps(commit="abc1234" + "0" * 33, timestamp="2025-01-01T00:00:00Z")
    new = _slower(_steps(commit="cde3456" + "0" * 33, timestamp="2025-03-01T00:00:00Z"), 1.3)
    S.write(pd.concat([old, new]), tmp_path / "hist", per_row=True)
    assert regress.main(["baseline=abc1234", f"results={tmp_path / 'hist'}"]) == 1
    out = capsys.readouterr().out
    assert "newest commit cde3456" in out and len(_rows(out, "SLOWER")) == len(old)


def test_cross_gpu_step_rows_are_compared_not_flagged(tmp_path, capsys):
    base = _steps()
    cand = _slower(_steps(gpu_name="FAKE-GPU-B 141GB"), 1.5)
    assert _run(tmp_path, base, cand) == 0
    out = capsys.readouterr().out
    assert len(_rows(out, "compared")) == len(base) and "model-step rows" in out
