"""The sweep's `timed` key on the CPU interpreter (issue 42): forward and train rows of a Triton design and of the
reference baseline, their FLOPs, the accuracy gate on O and the LSE (able to fail), and backward rows' keys as
before."""
import math

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir

from runners import sweep  # runners.* set TRITON_INTERPRET before `import variants`
from runners import tables as T
from runners.point import accuracy_scope, env, schema, timed
from runners.tables import results
import variants

TINY = ["seq=17", "head_dim=16", "batch=1", "heads=2", "bench.cpu_warmup=0", "bench.cpu_rep=1"]
TWO_PASS = ["variant=two_pass", "blocks.BLOCK_M1=16", "blocks.BLOCK_N1=16"]
pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")


def cfg_for(tmp_path, *overrides):
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        return compose("config", [*TINY, f"results_dir={tmp_path / 'results'}", "sweep_id=test", "isolate=false",
                                  "resume=false",
                                  *overrides])


def measured(tmp_path, *overrides) -> pd.Series:
    """The row written for the point, as results.load reads it back."""
    row = sweep.run_point(cfg_for(tmp_path, *overrides), out=lambda _: None)
    df = results.load(tmp_path / "results")
    return df[(df["config_key"] == row["config_key"]) & (df["timestamp"] == row["timestamp"])].iloc[0]


def tiny_problem(causal: bool, dtype=torch.float32):
    return variants.Problem(1, 17, 17, 2, 2, 16, causal, dtype, "cpu")


@pytest.mark.parametrize("kind, causal, dtype", [("forward", False, "fp32"), ("forward", True, "fp16"),
                                                 ("train", True, "fp32")])
def test_two_pass_rows_gate_o_and_lse(tmp_path, kind, causal, dtype):
    r = measured(tmp_path, *TWO_PASS, f"timed={kind}", f"causal={str(causal).lower()}", f"dtype={dtype}")
    assert (r.status, bool(r.correct), r.timed, r.forward_ran) == ("ok", True, kind, "stock"), r.reason
    assert r.rel_o < (1e-4 if dtype == "fp32" else 5e-3) and r.rel_lse < 1e-5  # the LSE: fp32 statistics
    assert f"|timed={kind}" in r.config_key and r.ms > 0
    problem = tiny_problem(causal)
    pairs = 17 * 17 / 2 if causal else 17 * 17  # FlashAttention's convention: causal halved
    forward = 2.0 * 1 * 2 * pairs * (16 + 16)  # 2 B H pairs (D + Dv) = 4 B H pairs D
    assert problem.forward_flops() == forward and problem.backward_flops() == 2.5 * forward
    assert r.flops == (forward if kind == "forward" else 3.5 * forward)
    assert r.tflops == pytest.approx(r.flops / (r.ms * 1e-3) / 1e12)
    if kind == "train":
        assert r.rel_dq < 1e-4 and r.rel_dk < 1e-4 and r.rel_dv < 1e-4 and r.workspace_bytes >= 0
    else:
        assert math.isnan(r.rel_dq) and math.isnan(r.workspace_bytes)


@pytest.mark.parametrize("kind", ["forward", "train"])
def test_reference_baseline_rows_gate_o(tmp_path, kind):
    """A baseline runs its own forward (no LSE exposed: not gated, NaN), inputs that require grad as in training."""
    r = measured(tmp_path, "variant=reference", f"timed={kind}", "causal=true", "heads=4", "kv_heads=2", "seq_k=23",
                 "dtype=fp32")
    assert (r.status, bool(r.correct), r.forward_ran) == ("ok", True, "own"), r.reason
    assert r.rel_o < 1e-6 and math.isnan(r.rel_lse)
    assert (r.rel_dq < 1e-6) == (kind == "train")


def test_a_corrupted_o_or_lse_fails_the_gate(tmp_path, monkeypatch):
    impl = variants.get("two_pass")
    honest = type(impl).forward

    def wrong_o(self, *args, **kwargs):
        o, lse = honest(self, *args, **kwargs)
        return o * 1.1, lse

    monkeypatch.setattr(type(impl), "forward", wrong_o)
    r = measured(tmp_path, *TWO_PASS, "timed=forward", "dtype=fp32")
    assert (r.status, bool(r.correct)) == ("wrong", False), r.reason
    assert "rel_o=" in r.reason and math.isnan(r.tflops)
    r = measured(tmp_path, *TWO_PASS, "timed=train", "dtype=fp32")  # the backward from the wrong O: both gates say so
    assert r.status == "wrong" and "rel_o=" in r.reason

    def wrong_lse(self, *args, **kwargs):
        o, lse = honest(self, *args, **kwargs)
        return o, lse + 0.01

    monkeypatch.setattr(type(impl), "forward", wrong_lse)
    r = measured(tmp_path, *TWO_PASS, "timed=forward", "dtype=fp32")
    assert r.status == "wrong" and "rel_lse=" in r.reason and "rel_o=" not in r.reason


def test_a_corrupted_baseline_output_fails_the_gate(tmp_path, monkeypatch):
    impl = variants.get("reference")
    honest = type(impl).function
    monkeypatch.setattr(type(impl), "function", lambda self, *a, **kw: honest(self, *a, **kw) * 0.9)
    r = measured(tmp_path, "variant=reference", "timed=forward", "dtype=fp32")
    assert r.status == "wrong" and "rel_o=" in r.reason


def test_lse_gate_needs_inf_where_a_row_sees_no_key():
    ref = torch.tensor([[[float("inf"), 1.0, 2.0]]])
    cols, bad = timed.lse_error_columns(torch.tensor([[[5.0, 1.0, 2.0]]]), ref)
    assert bad and cols["rel_lse"] == 0.0
    assert timed.lse_error_columns(ref.clone(), ref)[1] == ""


def test_backward_rows_keep_their_key_and_a_bad_kind_is_a_config_error(tmp_path):
    backward = schema.check(cfg_for(tmp_path, *TWO_PASS), "cpu")
    named = schema.check(cfg_for(tmp_path, *TWO_PASS, "timed=backward"), "cpu")
    forward = schema.check(cfg_for(tmp_path, *TWO_PASS, "timed=forward"), "cpu")
    assert backward.timed == "backward" and "timed" not in backward.config_key("wall_clock")
    assert named.config_key("wall_clock") == backward.config_key("wall_clock")
    assert forward.config_key("wall_clock") == backward.config_key("wall_clock") + "|fwd=auto|timed=forward"
    with pytest.raises(schema.ConfigError, match="timed: must be one of backward, forward, train"):
        schema.check(cfg_for(tmp_path, *TWO_PASS, "timed=pass"), "cpu")


def test_kinds_never_join_and_figures_take_the_backward():
    """join_key keeps a forward row apart from the backward row of its point (latest() would drop one), a row
    without the column (before issue 42) is a backward row, and kernel_rows gives the backward unless asked."""
    base = {"variant": "two_pass", "batch": 1, "heads": 2, "kv_heads": 2, "seq": 17, "seq_k": 17, "head_dim": 16,
            "causal": False, "dtype": "fp32", "layout": "bnhd", "status": "ok", "correct": True, "config_key": "",
            "timer": "wall_clock", "device": "cpu-interpreter", "timestamp": "2026-11-26T00:00:00+00:00"}
    df = T.normalize(pd.DataFrame([{**base}, {**base, "timed": "forward", "forward": "gluon"},
                                   {**base, "timed": "train"}, {**base, "timed": None}]))
    assert list(df["timed"]) == ["backward", "forward", "train", "backward"]
    keys = list(df["join_key"])
    assert keys[0] == keys[3] and keys[2] == keys[0] + "|timed=train"
    assert keys[1] == keys[0] + "|timed=forward|fwd=gluon"
    assert len(T.latest(df)) == 3
    assert list(T.kernel_rows(df).index) == [0, 3] and len(T.kernel_rows(df, None)) == 4
    assert list(T.kernel_rows(df, "train").index) == [2]


def test_a_design_without_a_forward_is_unsupported():
    class OnlyPrepare(variants.base.Variant):
        name = "only_prepare"

    assert timed.unsupported(OnlyPrepare(), "backward") is None
    assert "no forward of its own" in timed.unsupported(OnlyPrepare(), "train")
    assert timed.unsupported(variants.get("two_pass"), "forward") is None
    assert timed.unsupported(variants.get("sdpa_cudnn"), "train") is None


def test_chunked_and_sliced_forward_references_are_exact(monkeypatch):
    """Long problems: the reference O and LSE over query chunks equal the one-call ones (causal Nq != Nk, rows that
    see no key included), and a problem past the full-scope limit is checked on batch 0's first kv-head group."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 40, 4, 8, generator=gen)
    k, v = (torch.randn(2, 30, 2, 8, generator=gen) for _ in range(2))
    whole_o, whole_lse = timed.reference_o_lse(q, k, v, True, 0.3)
    monkeypatch.setattr(accuracy_scope, "REF_CHUNK_BYTES", 4 * 2 * 4 * 30 * 7)  # 7 query rows per chunk
    o, lse = timed.reference_o_lse(q, k, v, True, 0.3)
    assert torch.allclose(o, whole_o, atol=1e-6) and torch.equal(torch.isinf(lse), torch.isinf(whole_lse))
    assert torch.isinf(lse[:, :, :10]).all() and torch.allclose(lse[:, :, 10:], whole_lse[:, :, 10:], atol=1e-5)
    monkeypatch.setattr(accuracy_scope, "REF_FULL_LIMIT_BYTES", 16)
    cols = timed.check_forward(whole_o, whole_lse, q, k, v, True, 0.3, torch.float32)
    assert cols["accuracy_scope"] == "batch0-kvgroup0" and cols["correct"], cols["_wrong_reason"]
    bad = whole_o.clone()
    bad[0, :, 1] += 1.0  # a query head of the checked group
    assert not timed.check_forward(bad, whole_lse, q, k, v, True, 0.3, torch.float32)["correct"]


def test_cpu_budget_estimates_what_is_timed(tmp_path):
    """The CPU interpreter's estimate (runners/point/cpu_cost.py) of a forward point is below its backward point's,
    and a train point's above it (each timed call runs the forward, and the backward too)."""
    from runners.point import cpu_cost
    cfg = cfg_for(tmp_path, *TWO_PASS, "bench.cpu_rep=3", "seq=64")
    seconds = {kind: cpu_cost.estimate_point(schema.check(cfg_for(tmp_path, *TWO_PASS, "bench.cpu_rep=3", "seq=64",
                                                                  f"timed={kind}"), "cpu"), cfg.bench)
               for kind in ("forward", "backward", "train")}
    assert seconds["forward"] < seconds["backward"] < seconds["train"]


def test_compare_draws_one_timed_kind(tmp_path, figures):
    """plots.compare draws the backward rows unless timed= names another kind: a table of backward and forward rows
    (the forward ones 3x faster) gives each its own line values and stem; a table with no row of the kind asked
    for is a one-line error naming the kinds it has."""
    from plots import _synthetic as S
    from plots import compare
    backward = S.table(seqs=(1024, 4096), variants=("two_pass", "sdpa_cudnn"), failures=False)
    forward = backward.assign(timed="forward", tflops=backward["tflops"] * 3)
    S.write(pd.concat([backward, forward]), tmp_path / "rows" / "fake-gpu" / "s")
    ys = {}
    for kind in ("backward", "forward"):
        assert compare.main([f"results={tmp_path / 'rows'}", f"out={tmp_path}", f"timed={kind}"]) == 0
        stem, fig = figures[-1]
        assert stem.endswith("_forward") == (kind == "forward") and kind in fig._suptitle.get_text()
        ax = next(a for a in fig.axes if a.get_title().split("\n")[0] == "head_dim=128, causal")
        line = next(line for line in ax.get_lines() if line.get_label() == "two_pass")
        ys[kind] = list(line.get_ydata())
    assert ys["forward"] == pytest.approx([3 * y for y in ys["backward"]])
    S.write(forward, tmp_path / "only" / "fake-gpu" / "s")
    with pytest.raises(T.UsageError, match="no timed=backward rows .*: forward"):
        compare.draw(T.load(tmp_path / "only"), tmp_path, dtype="bf16")
