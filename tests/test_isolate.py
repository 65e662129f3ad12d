"""Fault isolation on the CPU interpreter: a point that crashes its worker process (SIGSEGV from a wild store
through the Triton interpreter, SIGABRT, a vanishing exit, a sticky CUDA error) or hangs loses only its own
point; the points after it in the same run are ok. The fault variants live in tests/fault_variants.py and
are loaded with the runner's `plugins=` key, in the sweep process and in its spawned worker."""
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from runners import sweep
from runners.point import env, measure
from runners.isolation import isolate
from runners.tables import results
from variants import registry

PLUGIN = "tests.fault_variants"
TINY = ["seq=17", "head_dim=16", "batch=1", "heads=2", "dtype=fp32", "bench.cpu_warmup=0", "bench.cpu_rep=1"]
ISOLATED = ["variant=reference", f"plugins=[{PLUGIN}]", "isolate=true"]
pytestmark = pytest.mark.skipif(not env.interpreting(), reason="isolation tests are for the CPU interpreter")


@pytest.fixture
def faults():
    """The fault variants registered for one test, then taken out of the registry again (they are not
    product variants: test_configs checks the registry against conf/variant/); no worker left behind."""
    before = dict(registry._VARIANTS)
    GlobalHydra.instance().clear()
    yield
    isolate.shutdown()
    GlobalHydra.instance().clear()
    registry._VARIANTS.clear()
    registry._VARIANTS.update(before)
    sys.modules.pop(PLUGIN, None)


def cfg_for(tmp_path, *overrides):
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        return compose("config", [*TINY, *ISOLATED, f"results_dir={tmp_path / 'results'}", "sweep_id=test",
                                  *overrides])


def rows(tmp_path):
    return results.load(tmp_path / "results")


def test_multirun_crash_in_the_middle_and_a_hang_lose_only_their_points(tmp_path, monkeypatch, capsys, faults):
    """The GPU check of scripts/gpu_fault_isolation.sh, on the CPU: 5 points, the 3rd a real crash (the wild store
    segfaults the interpreter), the 4th a hang; 3 ok rows, 1 crashed, 1 timeout; the run exits 3."""
    monkeypatch.setattr(sys, "argv", ["runners/sweep.py"])
    with pytest.raises(SystemExit) as info:
        sweep.cli(["-m", *TINY, *ISOLATED, "variant.name=two_pass,atomic,fault_illegal_address,fault_hang,fused",
                   "point_timeout_s=15", f"results_dir={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / 'mr'}"])
    assert info.value.code == sweep.EXIT_FAULTS
    captured = capsys.readouterr()
    df = rows(tmp_path).sort_values("point_index")
    assert df.status.tolist() == ["ok", "ok", "crashed", "timeout", "ok"], df.reason.tolist()
    assert df[df.status == "ok"].correct.all()
    crashed, timed_out = df.iloc[2], df.iloc[3]
    assert "SIGSEGV" in crashed.reason and "\n" not in crashed.reason
    assert "point_timeout_s" in timed_out.reason
    assert "(3 ok, 1 crashed, 1 timeout)" in captured.out or "(3 ok, 1 timeout, 1 crashed)" in captured.out
    assert "crashed: fault_illegal_address" in captured.out and "timeout: fault_hang" in captured.out
    assert "2 point(s) crashed or timed out" in captured.err


def test_worker_is_reused_and_replaced_after_a_crash(tmp_path, faults, monkeypatch):
    """The GPU's worker (spawned once, reused); the CPU interpreter forks one per point."""
    monkeypatch.setattr(isolate, "start_method", lambda: "spawn")
    quiet = dict(out=lambda _: None)
    assert sweep.run_point(cfg_for(tmp_path, "seq=17"), **quiet)["status"] == "ok"
    first = isolate.worker_pid()
    assert first is not None
    assert sweep.run_point(cfg_for(tmp_path, "seq=18"), **quiet)["status"] == "ok"
    assert isolate.worker_pid() == first  # warm worker: same process, compile caches kept
    row = sweep.run_point(cfg_for(tmp_path, "variant.name=fault_exit"), **quiet)
    assert row["status"] == "crashed" and row["reason"] == "worker process died (exit code 3)"
    assert isolate.worker_pid() is None
    assert sweep.run_point(cfg_for(tmp_path, "seq=19"), **quiet)["status"] == "ok"
    assert isolate.worker_pid() not in (None, first)
    assert rows(tmp_path).status.tolist().count("ok") == 3  # the parent wrote the crashed row too
    assert len(rows(tmp_path)) == 4


def test_a_forked_worker_serves_one_point(tmp_path, faults):
    quiet = dict(out=lambda _: None)
    assert sweep.run_point(cfg_for(tmp_path, "seq=17"), **quiet)["status"] == "ok"
    assert isolate.worker_pid() is None  # retired after its point: the next one forks from the caller as it is then


@pytest.mark.parametrize("name, words", [
    ("fault_abort", ["SIGABRT", "Fatal Python error: Aborted"]),
    ("fault_cuda_error", ["backward: RuntimeError: CUDA error: an illegal memory access was encountered"]),
])
def test_fatal_point_is_a_crashed_row(tmp_path, faults, name, words):
    row = sweep.run_point(cfg_for(tmp_path, f"variant.name={name}"), out=lambda _: None)
    assert row["status"] == "crashed" and all(w in row["reason"] for w in words), row["reason"]
    assert "asynchronously reported" not in row["reason"]  # the first line of the error only
    assert isolate.worker_pid() is None  # a worker whose CUDA context may be dead is never reused


def test_without_isolation_a_sticky_cuda_error_is_still_crashed(tmp_path, faults):
    row = sweep.run_point(cfg_for(tmp_path, "variant.name=fault_cuda_error", "isolate=false"), out=lambda _: None)
    assert row["status"] == "crashed" and isolate.worker_pid() is None


def test_nan_gradients_are_wrong_not_a_fault(tmp_path, faults):
    row = sweep.run_point(cfg_for(tmp_path, "variant.name=fault_nan", "isolate=false"), out=lambda _: None)
    assert (row["status"], row["correct"]) == ("wrong", False)


def test_isolation_default_is_on_and_forks_on_the_cpu_interpreter(tmp_path):
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        assert isolate.enabled(compose("config", [])) and isolate.start_method() == "fork"
        assert isolate.enabled(compose("config", ["isolate=true"]))
        assert not isolate.enabled(compose("config", ["isolate=false"]))


def test_default_sweep_survives_a_point_that_ends_its_process(tmp_path, monkeypatch, capsys, faults):
    """With the default isolation (a forked worker per point on the CPU), a point that calls os._exit is a
    `crashed` row; the points after it are measured, the summary prints, exit status 3 (before: the sweep process
    itself exited with the point's code 3, the later rows lost and no summary)."""
    monkeypatch.setattr(sys, "argv", ["runners/sweep.py"])
    with pytest.raises(SystemExit) as info:
        sweep.cli(["-m", *TINY, "variant=reference", f"plugins=[{PLUGIN}]", "variant.name=two_pass,fault_exit,atomic",
                   f"results_dir={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / 'mr'}"])
    assert info.value.code == sweep.EXIT_FAULTS
    df = rows(tmp_path).sort_values("point_index")
    assert df.status.tolist() == ["ok", "crashed", "ok"]
    assert "exit code 3" in df.iloc[1].reason
    assert "3 rows (2 ok, 1 crashed)" in capsys.readouterr().out


def test_statuses_and_classification():
    assert {"crashed", "timeout"} <= set(measure.STATUSES) and set(measure.FAULT_STATUSES) == {"crashed", "timeout"}
    assert "crashed" not in results.RESUME_STATUSES and "timeout" not in results.RESUME_STATUSES  # rerun
    assert measure.classify(RuntimeError("CUDA error: unspecified launch failure"), True) == "crashed"
    assert measure.classify(RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered"),
                            True) == "crashed"
    assert measure.classify(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), True) == "oom"


def test_first_error_line():
    text = "some warning\nFatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n"
    assert isolate.first_error_line(text) == "Fatal Python error: Segmentation fault"
    assert isolate.first_error_line("") == ""


@pytest.mark.parametrize("argv, field", [
    (["isolate=maybe"], "isolate:"), (["point_timeout_s=0"], "point_timeout_s:"),
    (["plugins=[no_such_module_xyz]"], "plugins:"),
])
def test_bad_isolation_config_exits_2(tmp_path, capsys, argv, field):
    with pytest.raises(SystemExit) as info:
        sweep.cli([*argv, f"results_dir={tmp_path / 'results'}", f"hydra.run.dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and field in err
    assert not (tmp_path / "results").exists()
