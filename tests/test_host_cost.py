"""runners.host_cost (issue 44) on the CPU interpreter: one tiny shape's rows (bench_kind=host_cost, a Triton design on
the plan and the operator paths, a baseline direct), gradients checked, no plan built while timed, timings marked not
meaningful; bad arguments exit 2; and runners.regress compares host-cost rows like model-step rows, in a table of
their own, never joined with another kind's."""
import numpy as np
import pandas as pd
import pytest
import torch

from plots import _synthetic as S
from runners import host_cost
from runners import tables as T
from runners.regression import measured as regress

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter test (GPU: the runner itself)")


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("host_cost")
    assert host_cost.main(["variant=two_pass,reference", "warmup=1", "rep=3", f"results_dir={out}",
                           "sweep_id=tiny"]) == 0
    return T.load(out)


def test_tiny_shape_rows(rows):
    assert sorted(zip(rows["variant"], rows["call_path"])) == [("reference", "direct"), ("two_pass", "operator"),
                                                               ("two_pass", "plan")]
    assert (rows["bench_kind"] == T.HOST_KIND).all() and (rows["status"] == "ok").all() and rows["correct"].all()
    assert not rows["timing_meaningful"].any()  # the interpreter's time, not a GPU host's
    assert (rows["ms"] > 0).all() and (rows["ms_p20"] <= rows["ms_p80"]).all()
    assert (rows["rel_dq"] < 1e-4).all()  # fp32: checked against the reference
    assert (rows["plan_builds"] == 0).all()  # the timed calls re-validated nothing
    assert (rows["seq"] == 16).all() and (rows["dtype"] == "fp32").all()
    assert len(set(rows["join_key"])) == 3 and all(key.startswith(T.HOST_KIND + "|") for key in rows["join_key"])
    assert T.kernel_rows(rows).empty and T.step_rows(rows).empty  # neither a kernel nor a model-step row


def test_designs_are_timed_in_interleaved_rounds(tmp_path, monkeypatch):
    """rounds=3: each point's calls come in three blocks, the order rotated each round (a slow spell of the host is
    shared by every design); the first call (checked) and a warm call after the timed ones are outside the rounds."""
    calls = []
    one_call = host_cost.one_call
    monkeypatch.setattr(host_cost, "one_call", lambda variant, *args: calls.append(variant) or one_call(variant, *args))
    assert host_cost.main(["variant=two_pass,atomic,reference", "path=plan", "warmup=0", "rep=3", "rounds=3",
                           f"results_dir={tmp_path}", "sweep_id=rounds"]) == 0
    tp, at, ref = "two_pass", "atomic", "reference"
    assert calls == [tp, at, ref] + [tp, at, ref, at, ref, tp, ref, tp, at] + [tp, at, ref]
    assert (T.load(tmp_path)["rounds"] == 3).all()


def test_bad_arguments_exit_2(capsys):
    for argv in (["dtype=bf16"], ["path=fast"], ["rep=0"], ["rounds=0"], ["seq=x"], ["nope=1"], ["variant=nope"]):
        assert host_cost.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("config error:") and err.count("\n") == 1, err


def _as_gpu(df: pd.DataFrame, commit: str) -> pd.DataFrame:
    """The CPU rows as if a GPU had measured them (timed, one GPU name, one commit)."""
    raw = df[[c for c in df.columns if not c.startswith("_") and c not in ("join_key", T.GPU, T.PEAK)]].copy()
    raw["timing_meaningful"], raw["gpu_name"], raw["device"] = True, "FAKE-GPU-A 80GB", "cuda"
    raw["commit"], raw["dirty"] = commit, False
    raw["timestamp"] = "2025-01-01T00:00:00Z" if commit.startswith("a") else "2025-01-02T00:00:00Z"
    return raw


def test_regress_flags_a_slower_host_cost_row(rows, tmp_path, capsys):
    base = _as_gpu(rows, "a" * 40)
    for col, value in (("ms", 1.0), ("ms_p20", 0.98), ("ms_p80", 1.02)):
        base[col] = value
    cand = _as_gpu(base, "b" * 40)
    planned = ((cand["variant"] == "two_pass") & (cand["call_path"] == "plan")).to_numpy()
    for col in ("ms", "ms_p20", "ms_p80"):
        cand.loc[planned, col] = cand.loc[planned, col] * 1.5  # the planned path 50 % slower
    steps = S.step_table(failures=False, variants=("two_pass",), modes=("eager",))  # a model step: its own key
    S.write(pd.concat([base, steps], ignore_index=True), tmp_path / "base")
    S.write(pd.concat([cand, steps.assign(commit="b" * 40, timestamp="2025-01-02T00:00:00Z")], ignore_index=True),
            tmp_path / "cand", per_row=True)
    assert regress.main([f"baseline={tmp_path / 'base'}", f"candidate={tmp_path / 'cand'}"]) == 1
    out = capsys.readouterr().out
    assert regress.HOST_HEADING in out and regress.STEP_HEADING in out
    slower = [line for line in out.splitlines() if line.lstrip().startswith("SLOWER ")]
    assert len(slower) == 1 and "two_pass" in slower[0] and "plan" in slower[0] and "0.667" in slower[0], out
    assert "3 host-cost point(s)" in out and "2 model-step point(s)" in out and "REGRESSED: 1 point(s)" in out
    assert np.isnan(rows["tflops"]).all()  # no TFLOPS: compared on calls/s
