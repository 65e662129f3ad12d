"""The varlen config group on the CPU interpreter: document lengths, a packed point's row, config errors, the plot."""
import json

import pytest

from runners import sweep
from runners.point import env, varlen_inputs
from runners.tables import results
from runners.point.schema import ConfigError
from tests.test_runner import cfg_for

pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")


@pytest.mark.parametrize("dist", ["fixed", "uniform", "lognormal"])
def test_doc_lengths_fill_the_tokens(dist):
    lens = varlen_inputs.doc_lengths(dist, 10_000, 300, sigma=1.0, max_len=2000, seed=3)
    assert sum(lens) == 10_000 and min(lens) >= 1 and max(lens) <= 2000
    assert lens == varlen_inputs.doc_lengths(dist, 10_000, 300, sigma=1.0, max_len=2000, seed=3)  # deterministic
    if dist == "fixed":
        assert set(lens[:-1]) == {300}


def test_packed_point_writes_a_correct_row(tmp_path):
    sweep.run_point(cfg_for(tmp_path, "variant=two_pass", "varlen=lognormal", "tokens=90", "seq=20", "causal=true",
                            "heads=2", "kv_heads=1", "blocks.BLOCK_M1=16", "blocks.BLOCK_N2=16"), out=lambda _: None)
    r = results.load(tmp_path / "results").iloc[0]
    lens = varlen_inputs.doc_lengths("lognormal", 90, 20)
    assert (r.status, bool(r.correct), r.varlen_dist, r.num_docs, r.tokens_total) == ("ok", True, "lognormal", len(lens), 90)
    assert r.mean_doc_len == 90 / len(lens) and r.max_doc_len == max(lens) and r.accuracy_scope == "full-per-document"
    assert "varlen[lognormal" in r.config_key
    from variants import Problem
    import torch
    assert r.flops == Problem.packed(lens, lens, 2, 1, 16, True, torch.float32, "cpu").backward_flops()


def test_packed_atomic_tma_point_is_measured(tmp_path):
    """atomic_tma serves packed points (no `unsupported` row); its fp32 dQ accumulator is [1, H, total_q, BLOCK_D]."""
    sweep.run_point(cfg_for(tmp_path, "variant=atomic_tma", "varlen=uniform", "tokens=40", "seq=12", "causal=true",
                            "heads=2", "kv_heads=1", "blocks.BLOCK_M=16", "blocks.BLOCK_N=32", "blocks.num_warps=4"),
                    out=lambda _: None)
    r = results.load(tmp_path / "results").iloc[0]
    assert (r.status, bool(r.correct), r.varlen_dist, r.tokens_total) == ("ok", True, "uniform", 40)
    assert r.workspace_bytes == 4 * 40 * 2 * 16  # fp32 x total_q x H x head_block(16)


def test_uniform_rows_record_the_batch_as_documents(tmp_path):
    sweep.run_point(cfg_for(tmp_path, "variant=atomic", "blocks.BLOCK_M=16"), out=lambda _: None)
    r = results.load(tmp_path / "results").iloc[0]
    assert (r.varlen_dist, r.num_docs, r.mean_doc_len, r.tokens_total) == ("none", 1, 17.0, 17)
    assert "varlen" not in r.config_key  # uniform keys unchanged: earlier rows still resume


@pytest.mark.parametrize("overrides, field", [
    (["varlen=lognormal"], "tokens"),
    (["varlen=fixed", "tokens=64", "seq_k=9"], "seq_k"),
    (["varlen=uniform", "tokens=64", "layout=bhnd"], "layout"),
    (["varlen=lognormal", "tokens=64", "varlen.mean_len=0"], "mean_len"),
    (["varlen=lognormal", "tokens=64", "varlen.dist=zipf"], "varlen.dist"),
])
def test_bad_varlen_config_names_the_field(tmp_path, overrides, field):
    from runners.point import schema
    with pytest.raises(ConfigError) as info:
        schema.check(cfg_for(tmp_path, *overrides), "cpu")
    assert info.value.field == field and "\n" not in str(info.value)


def test_varlen_plot_draws_only_results(tmp_path, monkeypatch):
    import pandas as pd
    from plots import common as C, varlen as plot
    from runners import tables as T
    sweep.run_point(cfg_for(tmp_path, "variant=fused", "varlen=uniform", "tokens=60", "seq=12", "causal=true",
                            "blocks.BLOCK_N1=32", "blocks.BLOCK_M2=32"), out=lambda _: None)
    df = results.load(tmp_path / "results")
    bad = df.assign(status="wrong", correct=False, tflops=1e9, variant="two_pass", config_key="x")
    heaviest_first = df.assign(longest_first=True, tflops=2e9, config_key="y",  # a schedule variant: not on the lines
                               blocks_json=[json.dumps({**json.loads(b), "longest_first": True}) for b in df["blocks_json"]])
    drawn = []
    real_save = C.save

    def save(fig, *args, **kwargs):  # the y values of every drawn line, before the figure is closed
        drawn.extend(y for ax in fig.axes for line in ax.get_lines() for y in line.get_ydata())
        return real_save(fig, *args, **kwargs)
    monkeypatch.setattr(C, "save", save)
    paths = plot.draw(T.normalize(pd.concat([df, bad, heaviest_first])), tmp_path / "plots", dtype="fp32",
                      dist="uniform")
    assert len(paths) == 1 and paths[0].stat().st_size > 0
    assert drawn and max(drawn) < 1e9  # neither the wrong row's TFLOPS nor the heaviest-first row drawn
    assert plot.draw(T.normalize(df), tmp_path / "plots", dtype="fp32", dist="lognormal") == []
