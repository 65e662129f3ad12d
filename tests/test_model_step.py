"""runners.model_step on the CPU interpreter: the tiny decoder, a design eager and compiled, rows in the sweep tables'
format with the training-agreement columns; the gate; one-line config errors."""
import math

import pandas as pd
import pytest
import torch

from runners.model import agreement, config as model_config, step as model_step
from runners.tables import results

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU smoke test (GPU: scripts/gpu_model_step.sh)")


def test_tiny_model_step_writes_gated_rows(tmp_path, capsys):
    code = model_step.main(["model=tiny", "variant=two_pass", "compile=eager,default", f"results_dir={tmp_path}",
                            "sweep_id=smoke", "steps=3"])
    assert code == 0
    df = results.load(sorted(tmp_path.rglob("*.parquet")))
    assert list(df["compile_mode"]) == ["eager", "default"]
    assert set(df["bench_kind"]) == {"model_step"} and set(df["status"]) == {"ok"} and df["correct"].all()
    assert (df["agreement_baseline"] == "reference").all() and (df["agreement_steps"] == 3).all()
    assert (df["loss_max_dev"] <= df["loss_tol"]).all() and (df["loss_spread"] == 0).all()
    assert (df["ms"] > 0).all() and not df["timing_meaningful"].any()
    assert df["config_key"].nunique() == 2
    assert "against reference" in capsys.readouterr().out


def test_eager_operator_mode_calls_the_operator_and_the_eager_mode_does_not(tmp_path, monkeypatch):
    """compile=eager-operator (issue 44's in-process A/B): the same eager model with every attention() call through
    the operator's dispatch; compile=eager takes the plan path and never enters the operator's implementation."""
    from variants import op
    calls = {"op": 0}
    resolve = op._resolve

    def counted(*args, **kwargs):
        calls["op"] += 1
        return resolve(*args, **kwargs)

    monkeypatch.setattr(op, "_resolve", counted)
    seen = {}
    for mode in ("eager", "eager-operator"):
        calls["op"] = 0
        code = model_step.main(["model=tiny", "variant=two_pass", f"compile={mode}", f"results_dir={tmp_path / mode}",
                                "sweep_id=smoke", "steps=2", "truth=none"])
        assert code == 0
        seen[mode] = calls["op"]
        df = results.load(sorted((tmp_path / mode).rglob("*.parquet")))
        assert list(df["compile_mode"]) == [mode] and set(df["status"]) == {"ok"} and not df["compiled"].any()
    assert seen["eager"] == 0 and seen["eager-operator"] > 0, seen


@pytest.mark.parametrize("argv,match", [
    (["model=nope"], "no conf/model/nope.yaml; known: .*tiny"),
    (["model=tiny", "heads=3", "kv_heads=2"], r"heads \(3\) must be a multiple of kv_heads"),
    (["model=tiny", "layers=two"], "layers must be int"),
    (["model=tiny", "widht=8"], r"unknown model key\(s\) \['widht'\]"),
    (["model=tiny", "variant=nope"], "unknown variant 'nope'"),
    (["model=tiny", "dtype=bf16"], "dtype=bf16 needs a GPU"),
    (["model=tiny", "compile=reduce-overhead"], "needs CUDA graphs"),
    (["model=tiny", "seq"], "arguments are key=value"),
    (["model=tiny", "truth=fp64"], "truth=fp64: one of auto, fp32, none"),
    (["model=tiny", "point_timeout=soon"], r"point_timeout=soon: seconds >= 0"),
], ids=["model", "gqa", "type", "unknown-key", "variant", "bf16", "cudagraphs", "not-key-value", "truth", "timeout"])
def test_bad_config_is_one_line(argv, match, capsys, tmp_path):
    assert model_step.main([*argv, f"results_dir={tmp_path}"]) == model_step.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith("config error: ") and err.count("\n") == 1
    assert pytest.importorskip("re").search(match, err), err
    assert not list(tmp_path.rglob("*.parquet"))


def test_agreement_gate():
    assert agreement.max_deviation([1.0, 0.5], [1.0, 0.45]) == pytest.approx(0.05)
    assert agreement.max_deviation([1.0, math.nan], [1.0, 0.5]) == math.inf
    assert agreement.verdict(0.04, spread=0.05, floor=0.01)[:2] == (True, 0.05)
    assert agreement.verdict(0.004, spread=0.0, floor=0.01)[:2] == (True, 0.01)
    correct, tolerance, reason = agreement.verdict(0.2, spread=0.05, floor=0.01)
    assert not correct and "beyond its own run-to-run spread 0.05" in reason


def test_truth_gate_judges_by_the_distance_to_fp32_attention():
    """With an fp32 truth the verdict is the truth's: a design as far from the baseline as it likes is correct while
    it is no further from fp32 attention than the farthest SDPA backend plus the spread, and wrong past that."""
    assert agreement.truth_verdict(0.012, sdpa_deviation=0.010, spread=0.004, floor=0.001)[:2] == (True, 0.014)
    correct, tolerance, reason = agreement.truth_verdict(0.02, sdpa_deviation=0.010, spread=0.004, floor=0.001)
    assert not correct and tolerance == pytest.approx(0.014) and "fp32-attention truth by 0.02" in reason
    gate = model_step.Gate([3.0, 2.0], spread=0.004, floor=0.001, truth_curve=[3.0, 2.03], sdpa_truth_dev=0.02)
    judged = gate.judge([3.0, 2.016])  # 0.016 off the baseline (beyond its spread), 0.014 off the truth
    assert judged["correct"] and judged["loss_max_dev"] > judged["loss_tol"]
    assert judged["loss_truth_dev"] == pytest.approx(0.014) and judged["loss_truth_tol"] == pytest.approx(0.024)
    assert not model_step.Gate([3.0, 2.0], 0.004, 0.001, [3.0, 2.0], 0.001).judge([3.0, 2.016])["correct"]


def test_truth_run_writes_its_columns(tmp_path, capsys):
    """truth=fp32 on the CPU smoke model: the fp32-attention curve is trained and every row carries its distance."""
    code = model_step.main(["model=tiny", "variant=two_pass", "compile=eager", "truth=fp32", f"results_dir={tmp_path}",
                            "sweep_id=truth", "steps=2"])
    assert code == 0
    df = results.load(sorted(tmp_path.rglob("*.parquet")))
    assert set(df["status"]) == {"ok"} and (df["loss_truth_dev"] <= df["loss_truth_tol"]).all()
    assert "fp32-attention truth" in capsys.readouterr().out
    config = model_config.load("tiny", {})
    assert not model_step.wants_truth("auto", config) and model_step.wants_truth("fp32", config)
    assert model_step.wants_truth("auto", model_config.load("tiny", {"dtype": "bf16"}))


def test_a_point_past_its_time_limit_is_a_timeout_row_and_the_next_one_runs(tmp_path, monkeypatch):
    """point_timeout: a (variant, mode) that does not finish in time (a compile that never ends) is a `timeout` row
    with its reason; the points after it are measured."""
    import time as clock
    real = model_step.measure_trained

    def slow_for_default_mode(config, variant, mode, *args):
        if mode == "default":
            clock.sleep(60)
        return real(config, variant, mode, *args)

    monkeypatch.setattr(model_step, "measure_trained", slow_for_default_mode)
    code = model_step.main(["model=tiny", "variant=two_pass", "compile=default,eager", "point_timeout=8",
                            f"results_dir={tmp_path}", "sweep_id=timeout", "steps=2"])
    assert code == 0
    df = results.load(sorted(tmp_path.rglob("*.parquet"))).set_index("compile_mode")
    assert df.loc["default", "status"] == "timeout" and "point_timeout=8 s" in df.loc["default", "reason"]
    assert df.loc["eager", "status"] == "ok"


def test_every_model_file_loads():
    for name in model_config.model_names():
        config = model_config.load(name)
        assert config.heads % config.kv_heads == 0, name
    assert {"tiny", "gpt_d64", "gpt_d128"} <= set(model_config.model_names())


def test_rows_read_as_sweep_tables(tmp_path):
    """A model-step row has every column the tables require (results.REQUIRED_COLUMNS)."""
    config = model_config.load("tiny")
    environment = {"gpu": "cpu-interpreter", "gpu_name": "cpu", "commit": "abc", "diff_hash": ""}
    row = model_step.row_of(config, "two_pass", "eager", "reference", 0, "s", 0,
                            {"status": "ok", "correct": True, "ms": 1.0}, environment)
    assert set(results.REQUIRED_COLUMNS) <= set(row)
    path = results.write_row(row, tmp_path, 0, "k")
    assert pd.read_parquet(path)["bench_kind"].iloc[0] == "model_step"
