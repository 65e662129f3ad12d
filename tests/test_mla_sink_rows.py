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
    # dsink may equal the reference to the bit here (fp32 on an H100: two sums of 53 rows each, within half an ulp);
    # the reference is autograd of the fp32 reference per document (varlen_inputs.packed_reference_grads), and a
    # wrong dsink is caught (test_a_wrong_dsink_makes_a_sliced_row_wrong)
    assert r.num_docs > 1 and 0 <= r.rel_dsink < 1e-4 and 0 < r.rel_dv < 1e-4


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


# ---- dsink on a sliced accuracy scope: checked over every batch entry and row (reference_rows.reference_dsink) ----

SLICED = ["batch=2", "heads=4", "kv_heads=2"]  # B 2, GQA 2:1: batch0-kvgroup0 keeps a quarter of the rows
TWO_PASS_SINK = ["variant=two_pass", *MLA, "sink=true", *SLICED, "blocks.BLOCK_M1=16", "blocks.BLOCK_N1=16"]


def slice_the_scope(monkeypatch, batch=2, heads=4, seq_k=17, rows=5):
    """REF_CHUNK_BYTES cut so that a sink point (its backward reference runs in one call up to REF_CHUNK_BYTES) is
    checked on batch0-kvgroup0 and the forward reference over every row takes `rows` query rows per chunk."""
    from runners.point import accuracy_scope
    monkeypatch.setattr(accuracy_scope, "REF_CHUNK_BYTES", 4 * batch * heads * seq_k * rows)
    assert accuracy_scope.chunk_rows(batch, heads, seq_k) == rows


@pytest.mark.parametrize("causal", ["false", "true"])
def test_a_sliced_row_gates_dsink_as_the_full_one(tmp_path, monkeypatch, causal):
    """The same sink point on the full scope and on batch0-kvgroup0: both rows carry a finite rel_dsink (before,
    NaN on the slice) and the two agree, the sliced one from the forward over every row in query chunks."""
    point = [*TWO_PASS_SINK, f"causal={causal}"]
    sweep.run_point(cfg_for(tmp_path / "full", *point), out=lambda _: None)
    slice_the_scope(monkeypatch)
    sweep.run_point(cfg_for(tmp_path / "sliced", *point), out=lambda _: None)
    (full,) = rows(tmp_path / "full").itertuples()
    (cut,) = rows(tmp_path / "sliced").itertuples()
    assert (full.accuracy_scope, cut.accuracy_scope) == ("full", "batch0-kvgroup0")
    assert (cut.status, bool(cut.correct)) == ("ok", True), cut.reason
    assert 0 < cut.rel_dsink < 1e-4 and 0 < full.rel_dsink < 1e-4  # 0 would be a self-comparison
    assert abs(cut.rel_dsink - full.rel_dsink) < 1e-6 and abs(cut.max_abs_dsink - full.max_abs_dsink) < 1e-5
    assert cut.config_key == full.config_key


def test_a_sliced_row_without_a_sink_is_unchanged(tmp_path, monkeypatch):
    """sink=false on a sliced scope: no dsink columns filled, the key of the plain point."""
    import math
    slice_the_scope(monkeypatch, rows=1)  # one_call is off without a sink: the 8 GiB limit decides the scope
    from runners.point import accuracy_scope
    monkeypatch.setattr(accuracy_scope, "REF_FULL_LIMIT_BYTES", 16)
    sweep.run_point(cfg_for(tmp_path, "variant=two_pass", "head_dim=24", *SLICED, "blocks.BLOCK_M1=16",
                            "blocks.BLOCK_N1=16"), out=lambda _: None)
    (r,) = rows(tmp_path).itertuples()
    assert (r.status, r.accuracy_scope, bool(r.sink)) == ("ok", "batch0-kvgroup0", False), r.reason
    assert math.isnan(r.rel_dsink) and math.isnan(r.max_abs_dsink) and "|mods[" not in r.config_key


def test_a_wrong_dsink_makes_a_sliced_row_wrong(tmp_path, monkeypatch):
    """A design whose dsink is 0.1 off on every head (dq, dk, dv right): its row on batch0-kvgroup0 is `wrong`,
    rel_dsink named (before, the slice never looked at dsink and the row was ok)."""
    import variants
    impl = variants.get("two_pass")
    prepare = impl.prepare

    def poisoned(*args, **kwargs):
        fn = prepare(*args, **kwargs)
        return lambda: (lambda grads: (*grads[:-1], grads[-1] + 0.1))(fn())
    monkeypatch.setattr(impl, "prepare", poisoned)
    slice_the_scope(monkeypatch)
    sweep.run_point(cfg_for(tmp_path, *TWO_PASS_SINK, "causal=true"), out=lambda _: None)
    (r,) = rows(tmp_path).itertuples()
    assert (r.status, bool(r.correct), r.accuracy_scope) == ("wrong", False, "batch0-kvgroup0")
    assert "rel_dsink" in r.reason and "rel_dq" not in r.reason and r.rel_dsink > 1e-2
    assert max(r.rel_dq, r.rel_dk, r.rel_dv) < 1e-4


@pytest.mark.parametrize("modifier", ["none", "gate", "window", "softcap"])
def test_a_sliced_gate_checks_the_whole_dsink(monkeypatch, modifier):
    """check_accuracy on batch0-kvgroup0 (B 2, GQA): the reference's gradients pass with rel_dsink about 1e-7, a
    dsink 1 % off fails, and so does the slice's own dsink (batch 0, the first kv-head group: the scope's
    reference before) in place of the whole one. A modifier or the gate: the forward per (batch entry, kv-head)."""
    import torch
    from runners.point import measure
    from variants.problem import Modifiers
    from variants.reference import reference_grads
    from tests.test_mla_sinks import make_case
    q, k, v, do, sink = make_case(2, 30, 30, 4, 2, 24, 16, dtype=torch.float32, device="cpu")
    mods = {"window": Modifiers(window_left=7, window_right=0), "softcap": Modifiers(softcap=5.0)}.get(
        modifier, Modifiers())
    g = None
    if modifier == "gate":
        g = torch.nn.functional.logsigmoid(torch.randn(2, 30, 4, generator=torch.Generator().manual_seed(1)) + 2.0)
    options = dict(window_size=(mods.window_left, mods.window_right), softcap=mods.softcap, g=g, sink=sink)
    right = reference_grads(q, k, v, do, True, 0.2, **options)[1:]
    sliced_options = dict(options, g=None if g is None else g[:1, :, :2], sink=sink[:2])
    own = reference_grads(q[:1, :, :2], k[:1, :, :1], v[:1, :, :1], do[:1, :, :2], True, 0.2, **sliced_options)[-1]
    slice_the_scope(monkeypatch, batch=2, heads=4, seq_k=30, rows=7)
    gate = dict(causal=True, scale=0.2, dtype=torch.float32, mods=mods, g=g, sink=sink)
    ok = measure.check_accuracy(right, q, k, v, do, **gate)
    assert ok["accuracy_scope"] == "batch0-kvgroup0" and ok["correct"], ok["_wrong_reason"]
    assert 0 < ok["rel_dsink"] < 1e-5
    off = measure.check_accuracy((*right[:-1], right[-1] * 1.01), q, k, v, do, **gate)
    assert not off["correct"] and "rel_dsink" in off["_wrong_reason"] and off["rel_dq"] < 1e-5
    slice_only = right[-1].clone()
    slice_only[:2], slice_only[2:] = own, 0.0
    assert not measure.check_accuracy((*right[:-1], slice_only), q, k, v, do, **gate)["correct"]


@pytest.mark.parametrize("shape", [(2, 40, 30, 4, 2), (1, 23, 31, 2, 1), (2, 17, 17, 2, 2)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunked", [False, True])
def test_reference_dsink_is_autograd_of_the_reference(monkeypatch, shape, causal, chunked):
    """reference_rows.reference_dsink (the fp32 forward's O and LSE, in query chunks or not; causal Nq > Nk: rows
    that see no key, whole chunks of them) equals autograd of variants/reference.py's dsink."""
    import torch
    from runners.point import reference_rows
    from variants.reference import reference_grads
    from tests.test_mla_sinks import make_case
    b, nq, nk, h, hkv = shape
    q, k, v, do, sink = make_case(b, nq, nk, h, hkv, 24, 16, dtype=torch.float32, device="cpu")
    expected = reference_grads(q, k, v, do, causal, 0.2, sink=sink)[-1]
    if chunked:
        slice_the_scope(monkeypatch, batch=b, heads=h, seq_k=nk, rows=3)
    got = reference_rows.reference_dsink(q, k, v, do, causal, 0.2, sink)
    assert got.dtype == torch.float32 and got.shape == (h,)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # fp64 both ways: the same to rounding
    q64, k64, v64, do64 = (t.double() for t in (q, k, v, do))
    expected64 = reference_grads(q64, k64, v64, do64, causal, 0.2, torch.float64, sink=sink.double())[-1]
    assert (got.double() - expected64).abs().max() < 1e-5
