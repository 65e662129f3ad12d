"""Score modifiers as sweep axes (issue 24): `window`, `window_right`, `softcap`, `gate` in conf/config.yaml -> rows
with their own key, FLOPs counted over the visible pairs, an accuracy gate that checks the modifiers (and dg), one-line
errors for bad values, and tables that keep a modified row apart from a plain one."""
import pytest
import torch

from runners import sweep
from runners import tables as T
from runners.point import env, measure, schema
from tests.test_runner import BLOCKS, cfg_for, rows
from variants.problem import Modifiers, Problem, pair_count
from variants.reference import reference_grads, visible_pairs

pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")

# (overrides, the modifiers text a row shows); causal ones so that the gate can join
MODIFIED = [
    (["causal=true", "window=5"], "window=5,0"),
    (["causal=false", "window=4", "window_right=2", "seq_k=23"], "window=4,2"),
    (["causal=false", "softcap=3"], "softcap=3"),
    (["causal=true", "gate=true"], "gate"),
    (["causal=true", "window=6", "softcap=2", "gate=true", "heads=4", "kv_heads=2"], "window=6,0 softcap=2 gate"),
]


@pytest.mark.parametrize("overrides, text", MODIFIED, ids=[text for _, text in MODIFIED])
def test_modified_point_writes_a_correct_row(tmp_path, overrides, text):
    sweep.run_point(cfg_for(tmp_path, "variant=two_pass", *BLOCKS["two_pass"], *overrides), out=lambda _: None)
    r = rows(tmp_path).iloc[0]
    assert (r.status, bool(r.correct)) == ("ok", True), r.reason
    assert r.modifiers == text and f"|mods[{text}]" in r.config_key
    assert (r.rel_dg < 1e-4) == ("gate" in text)  # dg is checked exactly when there is a gate (NaN otherwise)
    point = schema.check(cfg_for(tmp_path, "variant=two_pass", *overrides), "cpu")
    assert r.flops == point.problem("cpu").backward_flops()
    assert point.problem("cpu").modifier_text == text


def test_plain_rows_keep_their_keys(tmp_path):
    """A config without modifiers has the key it had before issue 24 (resume and joins across commits hold)."""
    point = schema.check(cfg_for(tmp_path, "variant=two_pass"), "cpu")
    assert not point.modified and "mods[" not in point.config_key("wall_clock")
    assert point.problem("cpu").modifiers == ()


def test_a_design_without_the_modifier_gives_an_unsupported_row(tmp_path):
    sweep.run_point(cfg_for(tmp_path, "variant=sdpa_flash", "causal=true", "window=4"), out=lambda _: None)
    r = rows(tmp_path).iloc[0]
    assert r.status == "unsupported" and "window" in r.reason


@pytest.mark.parametrize("overrides, field", [
    (["window=-1"], "window"),
    (["window_right=3"], "window_right"),
    (["softcap=-1"], "softcap"),
    (["gate=true", "causal=false"], "gate"),
    (["gate=true", "causal=true", "seq_k=20"], "gate"),
])
def test_bad_modifier_config_is_one_line(tmp_path, overrides, field):
    with pytest.raises(schema.ConfigError) as err:
        schema.check(cfg_for(tmp_path, "variant=two_pass", *overrides), "cpu")
    assert err.value.field == field and "\n" not in str(err.value)


@pytest.mark.parametrize("seq_q, seq_k, causal, left, right", [
    (37, 37, True, 5, 0), (37, 37, True, 40, 0), (20, 33, True, 7, 0), (33, 20, True, 3, 0),
    (29, 41, False, 6, 9), (41, 29, False, -1, 4), (30, 30, False, 0, 0), (17, 17, False, 3, -1)])
def test_windowed_flops_count_the_visible_pairs(seq_q, seq_k, causal, left, right):
    """The FLOP convention for a window: the pairs the reference's mask lets through, counted exactly."""
    visible = visible_pairs(seq_q, seq_k, causal, (left, right), "cpu")
    assert pair_count(seq_q, seq_k, causal, left, 0 if causal else right) == int(visible.sum())
    problem = Problem(2, seq_q, seq_k, 3, 3, 8, causal, torch.float16, "cpu").with_modifiers((left, right))
    assert problem.forward_flops() == 4 * 2 * 3 * 8 * int(visible.sum())


def test_accuracy_gate_checks_the_modifiers():
    """Gradients of plain attention fail the gate of a softcapped, windowed, gated point; its own pass; a wrong dg
    alone fails it."""
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(1, 24, 2, 8) for _ in range(4))
    g = torch.nn.functional.logsigmoid(torch.randn(1, 24, 2) + 2)
    mods = Modifiers(6, 0, 2.0)
    right = reference_grads(q, k, v, do, True, 0.3, window_size=(6, 0), softcap=2.0, g=g)[1:]
    plain = reference_grads(q, k, v, do, True, 0.3)[1:] + (torch.zeros_like(g),)
    check = dict(causal=True, scale=0.3, dtype=torch.float32, mods=mods, g=g)
    assert measure.check_accuracy(right, q, k, v, do, **check)["correct"]
    assert not measure.check_accuracy(plain, q, k, v, do, **check)["correct"]
    wrong_dg = measure.check_accuracy(right[:3] + (right[3] * 1.1,), q, k, v, do, **check)
    assert not wrong_dg["correct"] and wrong_dg["rel_dg"] > 0.05


def test_tables_keep_modified_rows_apart(tmp_path):
    for extra in ([], ["window=5"]):
        sweep.run_point(cfg_for(tmp_path, "variant=two_pass", "causal=true", *BLOCKS["two_pass"], *extra),
                        out=lambda _: None)
    df = T.load(tmp_path / "results")
    assert sorted(df["modifiers"]) == ["", "window=5,0"]
    assert df["join_key"].nunique() == 2 and "|mods[window=5,0]" in df["join_key"].iloc[df["modifiers"].argmax()]
    assert {T.shape_text(r).endswith("window=5,0") for _, r in df.iterrows()} == {False, True}


def test_compare_plot_keeps_a_modified_line_apart(tmp_path):
    """plots.compare: a windowed row is not a point of the plain line; modifiers= picks the rows to draw."""
    from plots import compare
    for extra in ([], ["window=5"]):
        sweep.run_point(cfg_for(tmp_path, "variant=two_pass", "causal=true", *BLOCKS["two_pass"], *extra),
                        out=lambda _: None)
    df = T.load(tmp_path / "results")
    df["timing_meaningful"] = True  # as GPU rows: the plot draws only timings that count
    rows, notes = compare.pick_family(df)
    assert len(rows) == 1 and notes and "modifiers=" in notes[0]
    assert compare.draw(df, tmp_path / "out", dtype="fp32", modifiers="window=5,0")
    with pytest.raises(T.UsageError, match="modifiers="):
        compare.draw(df, tmp_path / "out", dtype="fp32", modifiers="softcap=9")
