"""plots.utilization and the report's tensor-pipe section on FABRICATED Nsight Compute columns (plots._synthetic):
TFLOPS vs tensor-pipe % per design, the backward's time-weighted %, the table; rows without the columns give one
line saying why (their ncu_note), never an error."""
import json
import math

import pandas as pd
import pytest

from plots import _synthetic as S
from plots import report, utilization

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def with_ncu(tmp_path):
    df = S.with_ncu(S.with_explanation(S.table()))
    return S.write(df, tmp_path / "in")


def test_backward_pct_is_time_weighted():
    row = {"ncu_tensor_pct": json.dumps({"a": 60.0, "b": 0.0, "c": None}),
           "ncu_kernel_ms": json.dumps({"a": 3.0, "b": 1.0, "c": 5.0})}
    assert utilization.backward_pct(row, "ncu_tensor_pct") == pytest.approx(45.0)
    assert math.isnan(utilization.backward_pct({"ncu_tensor_pct": "", "ncu_kernel_ms": ""}, "ncu_tensor_pct"))


def test_report_has_the_utilization_section_and_figure(with_ncu, tmp_path):
    assert report.main([f"results={with_ncu}", f"out={tmp_path / 'out'}"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    section = md[md.index("## Tensor-pipe utilization"):md.index("## Plots")]
    assert "tensor pipe %" in section and "_dkdv_kernel" in section and "FAKE-GPU-A" in section
    assert "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel" in section  # a baseline's kernels are profiled too
    figures = sorted((tmp_path / "out").glob("utilization_*.png"))
    assert [p.name for p in figures] == ["utilization_fake-gpu-a-80gb_bf16.png"]
    assert figures[0].read_bytes()[:8] == PNG and f"]({figures[0].name})" in md


def test_only_correct_results_with_values_are_drawn(with_ncu, tmp_path, monkeypatch):
    counts = {}
    real = utilization._figure

    def figure(rows, *args):
        counts.update(rows["variant"].value_counts().to_dict())
        return real(rows, *args)

    monkeypatch.setattr(utilization, "_figure", figure)
    df = utilization.T.load(with_ncu)
    assert len(utilization.draw(df, tmp_path / "out")) == 1
    # S.table: 20 shapes per variant; atomic has one wrong point, fused one oom; flex and sdpa_cudnn have no kernels
    assert counts == {"two_pass": 20, "atomic": 19, "fused": 19, "sdpa_flash": 20}


def test_rows_without_ncu_columns_say_why(tmp_path):
    df = S.with_explanation(S.table())
    df["ncu_note"] = "bench.ncu=false (off by default: ncu replays every kernel)"
    S.write(df, tmp_path / "in")
    assert report.main([f"results={tmp_path / 'in'}", f"out={tmp_path / 'out'}"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    section = md[md.index("## Tensor-pipe utilization"):md.index("## Plots")]
    assert "no ncu columns in these rows" in section and "bench.ncu=false" in section
    assert not list((tmp_path / "out").glob("utilization_*"))
    assert utilization.main([f"results={tmp_path / 'in'}", f"out={tmp_path / 'fig'}"]) == 2


def test_rows_written_before_the_columns(tmp_path):
    S.write(S.table(), tmp_path / "in")
    df = utilization.T.load(tmp_path / "in")
    assert "written before runners/point/ncu.py" in utilization.section(df)
    assert utilization.draw(df, tmp_path / "out") == []
    assert utilization.section(pd.DataFrame(columns=df.columns)).startswith("_(no ncu columns")
