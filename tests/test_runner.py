"""The sweep runner on the CPU interpreter: rows, failures as rows, resume, bad configs (exit 2), multirun."""
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from runners import sweep  # runners.* set TRITON_INTERPRET before `import variants`
from runners.point import accuracy_scope, env, measure, schema
from runners.tables import results
import variants

REPO = env.REPO
TINY = ["seq=17", "head_dim=16", "batch=1", "heads=2", "dtype=fp32", "bench.cpu_warmup=0", "bench.cpu_rep=1"]
BLOCKS = {"two_pass": ["blocks.BLOCK_M1=16", "blocks.BLOCK_N1=16"], "atomic": ["blocks.BLOCK_M=16"],
          "fused": ["blocks.BLOCK_N1=32", "blocks.BLOCK_M2=32"]}
COLUMNS = ["variant", "seq", "seq_k", "head_dim", "batch", "heads", "kv_heads", "causal", "dtype", "layout",
           "blocks_json", "config_key", "ms", "ms_p20", "ms_p80", "tflops", "tflops_p20", "tflops_p80",
           "executed_tflops", "pct_peak", "flops", "executed_flops", "peak_mem_bytes", "workspace_bytes", "correct",
           "max_abs_dq", "max_abs_dk", "max_abs_dv", "rel_dq", "rel_dk", "rel_dv", "timing_meaningful", "status",
           "reason", "device", "gpu_name", "compute_capability", "sm_count", "driver", "cuda", "torch", "triton",
           "python", "hostname", "commit", "dirty", "timestamp", "sweep_id"]
ROW = {"variant": "v", "status": "ok", "correct": True}  # the columns results.load requires (with the key ones)
pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")


def cfg_for(tmp_path, *overrides):
    """A point measured in this process (isolate=false), so that a test sees what its fakes record; the default
    isolation has its own tests (tests/test_isolate.py)."""
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        return compose("config", [*TINY, f"results_dir={tmp_path / 'results'}", "sweep_id=test", "isolate=false",
                                  *overrides])


def rows(tmp_path) -> pd.DataFrame:
    base = tmp_path / "results"
    return results.load(base) if base.exists() else pd.DataFrame()


@pytest.mark.parametrize("name", ["two_pass", "atomic", "fused"])
def test_point_writes_a_correct_row(tmp_path, name):
    row = sweep.run_point(cfg_for(tmp_path, f"variant={name}", *BLOCKS[name]), out=lambda _: None)
    df = rows(tmp_path)
    assert len(df) == 1 and set(COLUMNS) <= set(df.columns)
    r = df.iloc[0]
    assert (r.status, bool(r.correct), r.device, bool(r.timing_meaningful)) == ("ok", True, "cpu-interpreter", False)
    assert r.reason == "" and r.ms > 0 and r.tflops > 0 and r.rel_dq < 1e-4
    point = schema.check(cfg_for(tmp_path, f"variant={name}", *BLOCKS[name]), "cpu")
    assert {f: r[f] for f in point.blocks_dict} == point.blocks_dict  # one column per block field, resolved
    assert r.flops == variants.Problem(1, 17, 17, 2, 2, 16, False, torch.float32, "cpu").backward_flops()
    assert r.config_key == row["config_key"] and name in r.config_key
    assert (tmp_path / "results" / "cpu-interpreter" / "test").is_dir()


def test_causal_gqa_bhnd_cross_lengths(tmp_path):
    sweep.run_point(cfg_for(tmp_path, "variant=two_pass", "causal=true", "heads=4", "kv_heads=2", "seq_k=40",
                            "layout=bhnd", "blocks.BLOCK_M1=16", "blocks.BLOCK_N2=16"), out=lambda _: None)
    r = rows(tmp_path).iloc[0]
    assert (r.status, bool(r.correct), r.seq_k, r.kv_heads, r.layout) == ("ok", True, 40, 2, "bhnd")


def test_baseline_needing_cuda_is_unsupported(tmp_path):
    sweep.run_point(cfg_for(tmp_path, "variant=sdpa_flash"), out=lambda _: None)
    r = rows(tmp_path).iloc[0]
    assert r.status == "unsupported" and "CUDA" in r.reason and math.isnan(r.ms)


@pytest.mark.parametrize("exc, status", [
    (RuntimeError("boom\nsecond line"), "error"), (ValueError("not this shape"), "unsupported"),
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "oom"),
])
def test_failing_point_becomes_a_row(tmp_path, monkeypatch, exc, status):
    def prepare(*args, **kwargs):
        raise exc
    monkeypatch.setattr(variants.get("two_pass"), "prepare", prepare)
    sweep.run_point(cfg_for(tmp_path, "variant=two_pass"), out=lambda _: None)
    r = rows(tmp_path).iloc[0]
    assert r.status == status and r.reason.startswith("prepare: ") and "\n" not in r.reason


def test_triton_errors_are_classified():
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources
    assert measure.classify(OutOfResources(300000, 232448, "shared memory"), True) == "resources"
    assert measure.classify(CompilationError.__new__(CompilationError), True) == "compile_error"
    assert measure.classify(ValueError("x"), from_variant=False) == "error"


def test_wrong_point_keeps_its_time_but_no_throughput(tmp_path, monkeypatch):
    impl = variants.get("atomic")
    real = impl.prepare

    def prepare(*args, **kwargs):
        fn = real(*args, **kwargs)
        return lambda: (lambda g: (g[0] * 1.5, g[1], g[2]))(fn())
    monkeypatch.setattr(impl, "prepare", prepare)
    printed = []
    sweep.run_point(cfg_for(tmp_path, "variant=atomic", *BLOCKS["atomic"]), out=printed.append)
    r = rows(tmp_path).iloc[0]
    assert (r.status, bool(r.correct)) == ("wrong", False) and "rel_dq" in r.reason
    assert r.ms > 0 and math.isnan(r.tflops) and r.rel_dk < 1e-4
    assert "wrong" in printed[0]
    assert "wrong" in results.summary_table(rows(tmp_path))


def test_accuracy_is_checked_before_timing(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(measure, "check_accuracy", lambda *a, **k: calls.append("accuracy") or {
        "accuracy_scope": "full", "correct": True, "_wrong_reason": ""})
    monkeypatch.setattr(measure, "time_fn", lambda *a, **k: calls.append("timing") or [1.0, 0.9, 1.1])
    sweep.run_point(cfg_for(tmp_path, "variant=reference"), out=lambda _: None)
    assert calls == ["accuracy", "timing"]


def test_chunked_reference_is_exact(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    q, do = (torch.randn(1, 23, 4, 16, generator=gen) for _ in range(2))
    k, v = (torch.randn(1, 31, 2, 16, generator=gen) for _ in range(2))
    for causal in (False, True):
        full = variants.reference.reference_grads(q, k, v, do, causal, 0.25)[1:]
        monkeypatch.setattr(accuracy_scope, "REF_CHUNK_BYTES", 4 * 4 * 31 * 5)  # 5 query rows per chunk
        chunked = measure.chunked_reference_grads(q, k, v, do, causal, 0.25)
        monkeypatch.undo()
        for a, b in zip(full, chunked):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_resume_skips_recorded_points(tmp_path):
    printed = []
    assert sweep.run_point(cfg_for(tmp_path, "variant=atomic", *BLOCKS["atomic"]), out=printed.append) is not None
    assert sweep.run_point(cfg_for(tmp_path, "variant=atomic", *BLOCKS["atomic"], "sweep_id=again"),
                           out=printed.append) is None
    assert len(rows(tmp_path)) == 1 and "skipped" in printed[-1]
    sweep.run_point(cfg_for(tmp_path, "variant=atomic", *BLOCKS["atomic"], "resume=false"), out=printed.append)
    df = rows(tmp_path)
    assert len(df) == 2 and len(results.dedupe(df)) == 1
    assert results.dedupe(df).iloc[0].timestamp == df.timestamp.max()


def test_load_file_dir_and_dedupe(tmp_path):
    directory = tmp_path / "r" / "gpu" / "s1"
    a = results.write_row({"config_key": "k", "gpu_name": "g", "commit": "c", "timestamp": "2026-01-01T00:00:00",
                           "tflops": 1.0, **ROW}, directory, 0, "abc")
    b = results.write_row({"config_key": "k", "gpu_name": "g", "commit": "c", "timestamp": "2026-01-02T00:00:00",
                           "tflops": 2.0, **ROW}, directory, 0, "abc")  # same name: a new file, never an overwrite
    assert a != b and len(results.load(a)) == 1 and len(results.load(tmp_path / "r")) == 2
    assert results.dedupe(results.load(tmp_path / "r")).tflops.tolist() == [2.0]
    assert not list(directory.glob(".*tmp"))


@pytest.mark.parametrize("argv, field", [
    (["seq=0"], "seq:"), (["heads=3", "kv_heads=2"], "kv_heads:"), (["seqq=5"], "seqq"),
    (["variant=atomic", "blocks.BLOCK_M=48"], "blocks.BLOCK_M="), (["variant=atomic", "blocks.BLOCK_M1=64"],
                                                                   "blocks.BLOCK_M1"),
    (["-m", "seq=17,0"], "seq:"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_config_exits_2_with_one_line(tmp_path, capsys, argv, field):
    with pytest.raises(SystemExit) as info:
        sweep.cli([*argv, f"results_dir={tmp_path / 'results'}", f"hydra.run.dir={tmp_path / 'out'}",
                   f"hydra.sweep.dir={tmp_path / 'multirun'}"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert len(err.strip().splitlines()) == 1 and field in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.fixture
def clean_hydra():
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def test_multirun_goes_on_past_failures(tmp_path, monkeypatch, capsys, clean_hydra):
    def prepare(*args, **kwargs):
        raise RuntimeError("forced")
    monkeypatch.setattr(variants.get("fused"), "prepare", prepare)
    monkeypatch.setattr(sys, "argv", ["runners/sweep.py"])
    sweep.cli(["-m", *TINY, "variant=two_pass,sdpa_flash,fused,atomic", "causal=true,false",
               f"results_dir={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / 'mr'}"])
    out = capsys.readouterr().out
    df = rows(tmp_path)
    assert len(df) == 8 and df.sweep_id.nunique() == 1
    assert sorted(df.groupby("variant").status.first().items()) == [
        ("atomic", "ok"), ("fused", "error"), ("sdpa_flash", "unsupported"), ("two_pass", "ok")]
    assert df[df.variant.isin(["atomic", "two_pass"])].correct.all()
    assert "[1/8]" in out and "[8/8]" in out and "forced" in out
    assert f"sweep {df.sweep_id.iloc[0]}: 8 rows" in out and "rows: " in out  # the summary callback


def test_cli_subprocess_single_run_and_typo(tmp_path):
    """The real entry point: `python -m runners.sweep` writes a row; a typo'd key exits 2 with one line."""
    common = [f"results_dir={tmp_path / 'results'}", f"hydra.run.dir={tmp_path / 'out'}"]
    run = subprocess.run([sys.executable, "-m", "runners.sweep", *TINY, "variant=atomic", *BLOCKS["atomic"],
                          *common], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr
    assert "[1/1] atomic" in run.stdout and " ok" in run.stdout
    assert rows(tmp_path).iloc[0].status == "ok"
    bad = subprocess.run([sys.executable, "-m", "runners.sweep", "seqq=5", f"results_dir={tmp_path / 'bad'}"],
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "seqq" in bad.stderr
    assert not (tmp_path / "bad").exists()


def test_forward_choice_is_recorded_and_keyed(tmp_path):
    """forward=gluon on the CPU: the stock forward runs, and the row says which ran and why (issue 42); a backward
    row's key does not name the forward (its timing does not include it), so it is the default forward's (auto)."""
    sweep.run_point(cfg_for(tmp_path, "variant=two_pass", "forward=gluon", *BLOCKS["two_pass"]), out=lambda _: None)
    r = rows(tmp_path).iloc[0]
    assert (r.status, bool(r.correct), r.forward, r.forward_ran) == ("ok", True, "gluon", "stock")
    assert r.forward_reason and "fwd=" not in r.config_key
    point = schema.check(cfg_for(tmp_path, "variant=two_pass", *BLOCKS["two_pass"]), "cpu")
    assert point.forward == "auto" and point.config_key("wall_clock") == r.config_key
    forward = schema.check(cfg_for(tmp_path, "variant=two_pass", "forward=gluon", "timed=forward",
                                   *BLOCKS["two_pass"]), "cpu")
    assert forward.config_key("wall_clock") == r.config_key + "|fwd=gluon|timed=forward"
    with pytest.raises(schema.ConfigError, match="forward"):
        schema.check(cfg_for(tmp_path, "variant=two_pass", "forward=fast"), "cpu")


def test_a_gluon_variant_forward_is_a_sweep_choice(tmp_path):
    """forward=gluon.<variant> (kernels.forward_choice): a point's forward, keyed in forward rows as any other; a
    variant that is not one is a one-line ConfigError."""
    point = schema.check(cfg_for(tmp_path, "variant=two_pass", "forward=gluon.pp3_lpt", "timed=forward",
                                 *BLOCKS["two_pass"]), "cpu")
    assert point.forward == "gluon.pp3_lpt"
    assert point.config_key("wall_clock").endswith("|fwd=gluon.pp3_lpt|timed=forward")
    with pytest.raises(schema.ConfigError, match="forward='gluon.fast': gluon.<variant>"):
        schema.check(cfg_for(tmp_path, "variant=two_pass", "forward=gluon.fast"), "cpu")
