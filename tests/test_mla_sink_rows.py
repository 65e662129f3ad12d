"""Issue 47 in the sweep: `head_dim_v=` and `sink=` are config keys; a point's row records them (head_dim_v, sink and
the `modifiers` shape text 'dv=.. sink'), its key differs from the plain point's, its FLOPs follow the generalised
convention, dsink is in its accuracy gate, and a design that cannot take the case writes an `unsupported` row."""
import pytest

from runners import sweep  # runners.* set TRITON_INTERPRET before `import variants`
from runners.point import schema
from runners.tables import keys as K
from tests.test_runner import cfg_for, rows

MLA = ["head_dim=24", "head_dim_v=16"]


def point_of(tmp_path, *overrides):
    return schema.check(cfg_for(tmp_path, *overrides), "cpu")


def test_keys_and_text(tmp_path):
    plain = point_of(tmp_path, "head_dim=24")
    mla = point_of(tmp_path, *MLA)
    sink = point_of(tmp_path, "head_dim=24", "sink=true")
    same = point_of(tmp_path, "head_dim=24", "head_dim_v=24")  # = head_dim: the plain point
    assert same.config_key("t") == plain.config_key("t") and "|mods[" not in plain.config_key("t")
    assert mla.config_key("t").endswith("|mods[dv=16]") and sink.config_key("t").endswith("|mods[sink]")
    assert mla.problem("cpu").value_dim == 16 and sink.problem("cpu").sink
    both = point_of(tmp_path, *MLA, "sink=true", "causal=true")
    assert both.problem("cpu").modifier_text == "dv=16 sink" and "dv=16 sink" in both.label()


@pytest.mark.parametrize("overrides, field", [
    (["head_dim_v=0"], "head_dim_v"), (["head_dim_v=300"], "head_dim_v"), (["head_dim_v=-4"], "head_dim_v")])
def test_bad_configs_name_their_field(tmp_path, overrides, field):
    with pytest.raises(schema.ConfigError) as info:
        point_of(tmp_path, "head_dim=24", *overrides)
    assert info.value.field == field


@pytest.mark.parametrize("causal", ["false", "true"])
def test_a_point_writes_a_correct_row(tmp_path, causal):
    sweep.run_point(cfg_for(tmp_path, "variant=two_pass", *MLA, "sink=true", f"causal={causal}",
                            "blocks.BLOCK_M1=16", "blocks.BLOCK_N1=16"), out=lambda _: None)
    (r,) = rows(tmp_path).itertuples()
    assert (r.status, bool(r.correct), r.head_dim, r.head_dim_v, bool(r.sink), r.modifiers) == (
        "ok", True, 24, 16, True, "dv=16 sink"), r.reason
    assert 0 < r.rel_dsink < 1e-4 and 0 < r.rel_dv < 1e-4 and r.max_abs_dsink > 0  # 0 would be a self-comparison
    pairs = 17 * 17 / (2 if causal == "true" else 1)
    assert r.flops == 2 * 1 * 2 * pairs * (3 * 24 + 2 * 16)  # 2 * B * H * pairs * (3 D + 2 Dv)
    shape = {c: getattr(r, c) for c in ("batch", "heads", "kv_heads", "seq", "seq_k", "head_dim", "causal",
                                        "layout", "modifiers")}
    assert K.join_key("two_pass", shape, "fp32", {}, "wall_clock").endswith("|mods[dv=16 sink]")


@pytest.mark.parametrize("variant, blocks", [("two_pass", ["blocks.BLOCK_M1=16", "blocks.BLOCK_N1=16"]),
                                             ("atomic", ["blocks.BLOCK_M=16", "blocks.BLOCK_N=16"])])
def test_a_packed_point_writes_a_correct_row(tmp_path, variant, blocks):
    """A packed batch (varlen) with a value head dim of its own and a sink: v / do with Dv, the reference per
    document, dsink summed over the documents and checked."""
    sweep.run_point(cfg_for(tmp_path, f"variant={variant}", *MLA, "sink=true", "causal=true", "varlen=uniform",
                            "tokens=53", "seq=16", *blocks), out=lambda _: None)
    (r,) = rows(tmp_path).itertuples()
    assert (r.status, bool(r.correct), r.head_dim_v, bool(r.sink), r.accuracy_scope) == (
        "ok", True, 16, True, "full-per-document"), r.reason
    assert r.num_docs > 1 and 0 < r.rel_dsink < 1e-4 and 0 < r.rel_dv < 1e-4


def test_a_design_without_it_writes_an_unsupported_row(tmp_path):
    sweep.run_point(cfg_for(tmp_path, "variant=atomic_tma", *MLA, "blocks.BLOCK_M=16"), out=lambda _: None)
    (r,) = rows(tmp_path).itertuples()
    assert r.status == "unsupported" and "value head dim of its own" in r.reason


def test_a_gluon_forward_request_runs_stock_with_the_reason(tmp_path):
    """The forward choice (issue 42) beside issue 47: the Gluon forward takes neither, so the row records stock."""
    sweep.run_point(cfg_for(tmp_path, "variant=two_pass", *MLA, "sink=true", "forward=auto",
                            "blocks.BLOCK_M1=16", "blocks.BLOCK_N1=16"), out=lambda _: None)
    (r,) = rows(tmp_path).itertuples()
    assert (r.status, bool(r.correct), r.forward, r.forward_ran) == ("ok", True, "auto", "stock"), r.reason
    assert "V's head dim" in r.forward_reason and r.rel_dsink < 1e-4
    assert "fwd=" not in r.config_key and r.modifiers == "dv=16 sink"  # a backward row: its key names no forward


@pytest.mark.parametrize("packed", [False, True])
def test_accuracy_gate_can_fail_on_the_sink(packed):
    """The gate of a sink point (dense and packed): the reference's own gradients pass, those of attention without
    the sink fail, and a dsink 10 % off fails alone (rel_dsink named in the reason)."""
    import torch
    from kernels.varlen import Packing
    from runners.point import measure
    from variants.reference import reference_grads
    from tests.test_mla_sinks import make_case
    q, k, v, do, sink = make_case(1, 30, 30, 4, 2, 24, 16)
    options = {}
    if packed:
        q, k, v, do = (t[0] for t in (q, k, v, do))
        cu = torch.tensor([0, 11, 30], dtype=torch.int32)
        options = dict(varlen=Packing(cu, cu, total_q=30, total_k=30))
        right = reference_grads(q, k, v, do, True, 0.2, cu_seqlens_q=cu, cu_seqlens_k=cu, sink=sink)[1:]
        plain = reference_grads(q, k, v, do, True, 0.2, cu_seqlens_q=cu, cu_seqlens_k=cu)[1:] + (sink * 0,)
    else:
        right = reference_grads(q, k, v, do, True, 0.2, sink=sink)[1:]
        plain = reference_grads(q, k, v, do, True, 0.2)[1:] + (sink * 0,)
    gate = dict(causal=True, scale=0.2, dtype=torch.float32, sink=sink, **options)
    ok = measure.check_accuracy(right, q, k, v, do, **gate)
    assert ok["correct"] and ok["rel_dsink"] < 1e-6 and ok["rel_dv"] < 1e-6
    assert not measure.check_accuracy(plain, q, k, v, do, **gate)["correct"]
    off = measure.check_accuracy(right[:3] + (right[3] * 1.1,), q, k, v, do, **gate)
    assert not off["correct"] and 0.05 < off["rel_dsink"] and "rel_dsink" in off["_wrong_reason"]
