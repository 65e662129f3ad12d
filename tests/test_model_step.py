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


@pytest.mark.parametrize("argv,match", [
    (["model=nope"], "no conf/model/nope.yaml; known: .*tiny"),
    (["model=tiny", "heads=3", "kv_heads=2"], r"heads \(3\) must be a multiple of kv_heads"),
    (["model=tiny", "layers=two"], "layers must be int"),
    (["model=tiny", "widht=8"], r"unknown model key\(s\) \['widht'\]"),
    (["model=tiny", "variant=nope"], "unknown variant 'nope'"),
    (["model=tiny", "dtype=bf16"], "dtype=bf16 needs a GPU"),
    (["model=tiny", "compile=reduce-overhead"], "needs CUDA graphs"),
    (["model=tiny", "seq"], "arguments are key=value"),
], ids=["model", "gqa", "type", "unknown-key", "variant", "bf16", "cudagraphs", "not-key-value"])
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
