"""runners.point.ncu: the Nsight Compute columns (bench.ncu=true). CPU only: a canned `ncu --csv --page raw` output is
parsed, and a fake `ncu` executable on PATH stands in for Nsight Compute end to end (command, child spec, columns);
without ncu, with bench.ncu=false, on the CPU interpreter and when ncu fails the columns are empty and ncu_note
says why."""
import dataclasses
import json
import math
import os
import stat
from types import SimpleNamespace

import pytest

from runners.point import ncu

# What ncu prints with --csv --page raw --print-units base: its ==PROF== lines (and the child's own output, if any)
# first, then a header row, a units row (blank under the launch attributes), one row per profiled launch.
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum",'
          '"sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",'
          '"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"')
UNITS = '"","","","","","","","","","","","%","nsecond","%","%"'
CANNED = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.11)",
    '==PROF== Profiling "_delta_kernel" - 0: 0%....50%....100% - 3 passes',
    '==PROF== Profiling "_dkdv_kernel" - 1: 0%....50%....100% - 3 passes',
    "==PROF== Disconnected from process 4242",
    HEADER, UNITS,
    '"0","4242","python3.11","127.0.0.1","_delta_kernel","1","7","(128, 1, 1)","(64, 16, 4)","0","9.0",'
    '"81.5","12,000","0","0"',
    '"1","4242","python3.11","127.0.0.1","_dkdv_kernel","1","7","(256, 1, 1)","(32, 16, 4)","0","9.0",'
    '"12.25","1,500,000","61.5","0.5"',
    '"2","4242","python3.11","127.0.0.1","_dq_kernel","1","7","(256, 1, 1)","(32, 16, 4)","0","9.0",'
    '"20","600,000","50","0"',
    '"3","4242","python3.11","127.0.0.1","_dq_kernel","1","7","(256, 1, 1)","(32, 16, 4)","0","9.0",'
    '"40","200,000","70","0"',
    '"4","4242","python3.11","127.0.0.1","void at::native::vectorized_elementwise_kernel<4, '
    'at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, '
    'std::array<char*, 1ul>)","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","90","8,000","n/a","0"',
])
ERROR = ("==PROF== Connected to process 4242 (/usr/bin/python3.11)\n"
         "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
         "on the target device 0.\n==PROF== Disconnected from process 4242\n")
BENCH = SimpleNamespace(ncu=True, ncu_timeout_s=30.0)
POINT = SimpleNamespace(variant="two_pass", batch=1, seq=128, seq_k=128, heads=2, kv_heads=2, head_dim=64,
                        causal=True, dtype="bf16", layout="bnhd", doc_lens=None, window_left=64, window_right=0,
                        softcap=30.0, gate=True, blocks_dict={"BLOCK_M1": 32, "BLOCK_N1": 64})


def test_parse_canned_csv():
    kernels = ncu.parse_csv(CANNED)
    assert list(kernels) == ["_dkdv_kernel", "_dq_kernel", "_delta_kernel", "vectorized_elementwise_kernel[FillFunctor]"]
    assert kernels["_dkdv_kernel"] == {"ms": pytest.approx(1.5), "tensor_pct": 61.5, "dram_pct": 12.25, "launches": 1}
    dq = kernels["_dq_kernel"]  # two launches: ms summed, percentages weighted by duration (600 us and 200 us)
    assert dq["ms"] == pytest.approx(0.8) and dq["launches"] == 2
    assert dq["tensor_pct"] == pytest.approx((50 * 0.6 + 70 * 0.2) / 0.8)
    assert dq["dram_pct"] == pytest.approx((20 * 0.6 + 40 * 0.2) / 0.8)
    assert kernels["_delta_kernel"]["ms"] == pytest.approx(0.012) and kernels["_delta_kernel"]["tensor_pct"] == 0
    assert kernels["vectorized_elementwise_kernel[FillFunctor]"]["tensor_pct"] == 0  # gmma n/a, hmma 0


def test_parse_takes_the_busier_tensor_pipe_and_converts_units():
    text = CANNED.replace('"nsecond"', '"usecond"').replace('"61.5","0.5"', '"0.25","40"')
    kernels = ncu.parse_csv(text)
    assert kernels["_dkdv_kernel"]["tensor_pct"] == 40.0  # an mma.sync kernel: the hmma pipe is the busy one
    assert kernels["_dkdv_kernel"]["ms"] == pytest.approx(1500.0)  # 1,500,000 us


def test_parse_without_a_csv_and_with_a_broken_header():
    assert ncu.parse_csv(ERROR) == {}
    with pytest.raises(ValueError, match="Kernel Name"):
        ncu.parse_csv('"ID","Process ID"\n"0","1"\n')


def test_columns_top_kernel_and_json():
    cols = ncu.columns(CANNED, top_kernel="_dq_kernel")  # profile.py's top kernel, when ncu saw it
    assert set(cols) == set(ncu.EMPTY) and cols["ncu_note"] is None
    assert cols["top_kernel_tensor_pct"] == pytest.approx(55.0) and cols["top_kernel_dram_pct"] == pytest.approx(25.0)
    assert json.loads(cols["ncu_tensor_pct"])["_dkdv_kernel"] == 61.5
    assert json.loads(cols["ncu_dram_pct"])["_delta_kernel"] == 81.5
    assert json.loads(cols["ncu_kernel_ms"])["_dq_kernel"] == pytest.approx(0.8)
    fallback = ncu.columns(CANNED, top_kernel="a_kernel_ncu_did_not_see")  # -> the longest under ncu
    assert fallback["top_kernel_tensor_pct"] == 61.5 and fallback["top_kernel_dram_pct"] == 12.25


@pytest.mark.parametrize("stdout, returncode, note", [
    (ERROR, 1, "ncu failed: ERR_NVGPUCTRPERM - The user does not have permission"),
    ("==PROF== Disconnected from process 1\n", 0, "ncu failed: ncu profiled no kernel"),
    ("", 139, "ncu failed: exit status 139"),
    (HEADER + "\n" + UNITS + "\n", 0, "ncu failed: ncu profiled no kernel"),
])
def test_columns_say_why_they_are_empty(stdout, returncode, note):
    cols = ncu.columns(stdout, returncode=returncode)
    assert cols["ncu_tensor_pct"] is None and math.isnan(cols["top_kernel_tensor_pct"])
    assert cols["ncu_note"].startswith(note)


def test_child_error_is_the_note():
    cols = ncu.columns("", returncode=1, stderr="Traceback (most recent call last):\n  File ...\n"
                                                   "torch.OutOfMemoryError: CUDA out of memory.\n")
    assert cols["ncu_note"] == "ncu failed: torch.OutOfMemoryError: CUDA out of memory."


def test_not_run_notes():
    assert ncu.not_run(SimpleNamespace(ncu=False), on_gpu=True)["ncu_note"].startswith("bench.ncu=false")
    assert ncu.not_run(SimpleNamespace(), on_gpu=True)["ncu_note"].startswith("bench.ncu=false")  # key absent
    assert ncu.not_run(BENCH, on_gpu=False)["ncu_note"].startswith("CPU interpreter")
    assert ncu.not_run(BENCH, on_gpu=True)["ncu_note"] == "point not ok: not profiled"
    assert ncu.explain(POINT, SimpleNamespace(ncu=False), on_gpu=True)["ncu_note"].startswith("bench.ncu=false")


def test_metrics_per_architecture():
    assert ncu.TENSOR_GMMA in ncu.metrics((9, 0)) and ncu.TENSOR_HMMA in ncu.metrics((9, 0))
    assert ncu.TENSOR_GMMA not in ncu.metrics((8, 0))  # an unknown metric fails the whole ncu run
    assert ncu.DRAM in ncu.metrics(None) and ncu.DURATION in ncu.metrics(None)


def test_no_ncu_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    cols = ncu.explain(POINT, BENCH, on_gpu=True)
    assert cols["ncu_note"] == "ncu not on PATH" and cols["ncu_tensor_pct"] is None


def _fake_ncu(folder, body: str):
    """An executable `ncu` in `folder` that runs `body` (sh), after saving its argv (one per line) to argv.txt."""
    path = folder / "ncu"
    path.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "{folder}/argv.txt"\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_fake_ncu_end_to_end(tmp_path, monkeypatch):
    (tmp_path / "canned.csv").write_text(CANNED + "\n")
    _fake_ncu(tmp_path, f'cat "{tmp_path}/canned.csv"')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    cols = ncu.explain(POINT, BENCH, on_gpu=True, gpu_index=1, seed=7, top_kernel="_dkdv_kernel",
                       plugins=("variants.two_pass",), capability=(9, 0))
    assert cols["ncu_note"] is None and cols["top_kernel_tensor_pct"] == 61.5
    assert json.loads(cols["ncu_tensor_pct"])["_dq_kernel"] == pytest.approx(55.0)
    argv = (tmp_path / "argv.txt").read_text().splitlines()
    assert argv[:5] == ["--csv", "--page", "raw", "--print-units", "base"]
    assert argv[argv.index("--nvtx-include") + 1] == "ncu_backward/" and "--nvtx" in argv
    assert set(argv[argv.index("--metrics") + 1].split(",")) == {ncu.TENSOR_HMMA, ncu.TENSOR_GMMA, ncu.DRAM,
                                                                  ncu.DURATION}
    assert argv[-3:-1] == ["-m", "runners.point.ncu_child"]
    spec = json.loads(argv[-1])
    assert (spec["variant"], spec["seq"], spec["gpu_index"], spec["seed"], spec["blocks"], spec["plugins"]) == (
        "two_pass", 128, 1, 7, {"BLOCK_M1": 32, "BLOCK_N1": 64}, ["variants.two_pass"])


def test_fake_ncu_failure_and_timeout(tmp_path, monkeypatch):
    (tmp_path / "error.txt").write_text(ERROR)
    _fake_ncu(tmp_path, f'cat "{tmp_path}/error.txt"; exit 1')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    cols = ncu.explain(POINT, BENCH, on_gpu=True)
    assert cols["ncu_note"].startswith("ncu failed: ERR_NVGPUCTRPERM") and cols["ncu_dram_pct"] is None
    _fake_ncu(tmp_path, "sleep 20")
    cols = ncu.explain(POINT, SimpleNamespace(ncu=True, ncu_timeout_s=0.5), on_gpu=True)
    assert cols["ncu_note"] == "ncu failed: no result within bench.ncu_timeout_s=0.5 s"


def test_child_spec_rebuilds_the_point():
    from runners.point import ncu_child
    from runners.point.schema import Point
    import variants

    blocks = variants.get("two_pass").Blocks.from_dict({"BLOCK_M1": 32, "BLOCK_N1": 64})
    point = Point(variant="two_pass", batch=2, seq=96, seq_k=160, heads=4, kv_heads=2, head_dim=32, causal=True,
                  dtype="fp16", layout="bhnd", blocks=blocks, block_overrides={"BLOCK_M1": 32})
    windowed = dataclasses.replace(point, seq_k=96, window_left=17, window_right=0, softcap=20.0, gate=True)
    for point in (point, windowed):  # the score modifiers travel too (issue 24)
        spec = json.loads(json.dumps(ncu.child_spec(point, gpu_index=0, seed=3)))
        back = ncu_child.point_from_spec(spec)
        assert back.config_key("do_bench") == point.config_key("do_bench")
    assert ncu_child.main([]) == 2  # usage


@pytest.mark.parametrize("override, note", [([], "bench.ncu=false"), (["bench.ncu=true"], "CPU interpreter")])
def test_runner_rows_carry_the_empty_columns_and_why(tmp_path, override, note):
    from hydra import compose, initialize_config_dir

    from runners import sweep
    from runners.point import env
    from runners.tables import results

    if not env.interpreting():
        pytest.skip("the CPU interpreter's rows")
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        cfg = compose("config", ["seq=17", "head_dim=16", "batch=1", "heads=2", "dtype=fp32", "bench.cpu_warmup=0",
                                 "bench.cpu_rep=1", "variant=two_pass", "blocks.BLOCK_M1=16", "blocks.BLOCK_N1=16",
                                 f"results_dir={tmp_path}", "sweep_id=test", *override])
    sweep.run_point(cfg, out=lambda _: None)
    row = results.load(tmp_path).iloc[0]
    assert row.status == "ok" and set(ncu.EMPTY) <= set(row.index)
    assert row.ncu_note.startswith(note) and row.ncu_tensor_pct is None and math.isnan(row.top_kernel_tensor_pct)


def test_fault_and_not_measured_rows_say_why():
    from runners.isolation import isolate
    from runners.point import measure
    from runners.point.schema import Point
    import variants

    row = isolate.fault_row("crashed", "SIGSEGV")
    assert row["ncu_note"] == "not profiled: point crashed" and row["ncu_tensor_pct"] is None
    point = Point(variant="two_pass", batch=1, seq=64, seq_k=64, heads=1, kv_heads=1, head_dim=16, causal=False,
                  dtype="fp32", layout="bnhd", blocks=variants.get("two_pass").Blocks(), block_overrides={})
    assert measure.not_measured(point, "wall_clock", "skipped", "over budget")["ncu_note"] == "not profiled: point skipped"
