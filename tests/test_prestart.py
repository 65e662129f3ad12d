"""The fixed cost of a sweep (docs/scaling.md): a spawned isolated worker is started early (prestart), imports torch,
Triton and the designs before it says it is ready, and is adopted by the first point; the fault-isolation rules hold
for it (it dies or fails at start: the point is a `crashed` row or a fresh worker measures it). The GPU's spawn path
runs on the CPU here (monkeypatched start method, or FLASH_BWD_WORKER_START=spawn). Also: the phase log
(runners.phases) and the early key check's first sweep value."""
import json
import os
import signal
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from runners import phases, sweep
from runners.isolation import isolate
from runners.point import env
from runners.tables import results
from tests import worker_probe

TINY = ["seq=17", "head_dim=16", "batch=1", "heads=2", "dtype=fp32", "bench.cpu_warmup=0", "bench.cpu_rep=1",
        "variant=atomic", "blocks.BLOCK_M=16", "isolate=true"]
pytestmark = pytest.mark.skipif(not env.interpreting(), reason="the CPU interpreter's tests of the spawn path")


@pytest.fixture
def spawn(monkeypatch):
    monkeypatch.setattr(isolate, "start_method", lambda: "spawn")
    GlobalHydra.instance().clear()
    yield
    isolate.shutdown()
    GlobalHydra.instance().clear()


def cfg_for(tmp_path, *overrides):
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        return compose("config", [*TINY, f"results_dir={tmp_path / 'results'}", "sweep_id=test", *overrides])


def test_a_prestarted_worker_is_adopted_by_the_first_point(tmp_path, spawn):
    cfg = cfg_for(tmp_path)
    assert isolate.prestart(cfg)
    pid = isolate.worker_pid()
    assert pid is not None and isolate._POOL.worker.key == ((), None)  # bound to no GPU yet
    assert not isolate.prestart(cfg)  # one worker per process: a live one is kept
    row = sweep.run_point(cfg, out=lambda _: None)
    assert row["status"] == "ok" and row["correct"]
    assert isolate.worker_pid() == pid and isolate._POOL.worker.key == ((), 0)  # adopted, now bound to its GPU


def test_a_prestarted_worker_has_imported_the_measurement_before_its_first_call(spawn):
    assert isolate._POOL.prestart(())
    isolate._POOL.worker.wait_ready()
    out = isolate._POOL.run(worker_probe.loaded, ("runners.point.measure",), {}, key=((), 0), timeout_s=60, timer=None)
    assert out["loaded"] and out["pid"] == isolate.worker_pid()


def test_a_prestarted_worker_with_other_plugins_is_replaced(tmp_path, spawn):
    assert isolate._POOL.prestart(("tests.worker_probe",))
    first = isolate.worker_pid()
    row = sweep.run_point(cfg_for(tmp_path), out=lambda _: None)  # plugins=[]: another worker
    assert row["status"] == "ok" and isolate.worker_pid() not in (None, first)


def test_a_prestarted_worker_that_died_is_replaced(tmp_path, spawn):
    assert isolate._POOL.prestart(())
    first = isolate.worker_pid()
    os.kill(first, signal.SIGKILL)
    isolate._POOL.worker.process.join(30)
    row = sweep.run_point(cfg_for(tmp_path), out=lambda _: None)
    assert row["status"] == "ok" and isolate.worker_pid() not in (None, first)


def test_a_prestarted_worker_that_fails_at_start_is_a_crashed_row_and_the_next_point_runs(tmp_path, spawn):
    assert isolate._POOL.prestart(("tests.no_such_plugin",))
    crashed = isolate._POOL.run(worker_probe.loaded, ("x",), {}, key=(("tests.no_such_plugin",), 0), timeout_s=60,
                                timer=None)
    assert crashed["status"] == "crashed" and "worker process did not start" in crashed["reason"]
    assert "No module named 'tests.no_such_plugin'" in crashed["reason"] and isolate.worker_pid() is None
    assert sweep.run_point(cfg_for(tmp_path), out=lambda _: None)["status"] == "ok"


def test_no_prestart_where_workers_fork(tmp_path):
    assert isolate.start_method() == "fork"  # the CPU interpreter's default: one forked worker per point
    assert not isolate.prestart(cfg_for(tmp_path)) and isolate.worker_pid() is None
    assert not isolate.prestart(cfg_for(tmp_path, "isolate=false"))


def test_the_start_method_from_the_environment(monkeypatch):
    monkeypatch.setenv(isolate.START_ENV, "spawn")
    assert isolate.start_method() == "spawn"
    monkeypatch.setenv(isolate.START_ENV, "nonsense")
    assert isolate.start_method() == "fork"


@pytest.mark.parametrize("early", ["1", "0"])
def test_local_gpus_prestarts_one_worker_per_job_process(tmp_path, early):
    """The GPU's path on the CPU: two loky job processes, spawned workers. Each job process starts its worker as it
    starts, before its lease: its first task, sent during the sweep process's checks (early=1), or its import of the
    runner, told by the sweep process (FLASH_BWD_EARLY_JOBS=0); each worker is adopted (one worker per job process,
    none of a worker's own); every point ok; the phase log's summary names the phases."""
    from hydra_plugins import flash_bwd_local

    log = tmp_path / "phases.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "runners.sweep", "-m", "hydra/launcher=local_gpus", "hydra.launcher.n_jobs=2", *TINY,
         "seq=17,33", f"results_dir={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / 'mr'}"],
        cwd=env.REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TRITON_INTERPRET": "1", isolate.START_ENV: "spawn", phases.ENV: str(log),
             flash_bwd_local.EARLY_ENV: early})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    df = results.load(tmp_path / "results")
    assert len(df) == 2 and (df.status == "ok").all(), df[["status", "reason"]]
    records = phases.read(log)
    sweep_pid = next(r["pid"] for r in records if r["step"] == "cli")
    jobs = {r["pid"] for r in records if r["step"] == "job"}
    workers = {r["pid"] for r in records if r["step"] == "worker"}
    prestarted = {r["pid"]: r for r in records if r["step"] == "prestart"}
    lease = {r["pid"]: r for r in records if r["step"] == "lease"}
    assert sweep_pid not in jobs and 1 <= len(jobs) <= 2 and sweep_pid not in prestarted  # its jobs run elsewhere
    assert jobs <= set(prestarted) and all(prestarted[p]["t"] <= lease[p]["t"] for p in jobs)
    assert not workers & set(prestarted)  # a worker starts no worker of its own
    assert {prestarted[p]["worker"] for p in jobs} <= workers  # the worker each job process prestarted measured
    assert workers == {r["worker"] for r in prestarted.values()}  # every worker was a prestarted one
    warm = {r["pid"] for r in records if r["step"] == "warm"}  # processes started during the sweep's checks
    launch = next(r["t"] for r in records if r["step"] == "launch")
    if early == "1":
        assert warm and all(r["t"] < launch for r in records if r["step"] == "warm")
        assert jobs & warm  # ... which the launcher's Parallel reused for the jobs
    else:
        assert not warm and all(prestarted[p]["t"] > launch for p in jobs)
        imported = {r["pid"]: r for r in records if r["step"] == "imported" and r["pid"] in jobs}
        assert all(prestarted[p]["t"] <= imported[p]["t"] for p in jobs)  # at import, before the runner's imports
    summary = phases.summary(records)
    assert summary["points"] is not None and summary["fixed"] > 0 and summary["worker_start"] > 0


def test_phase_summary():
    records = [{"t": 100.0, "pid": 1, "step": "cli", "since_start_s": 2.0},
               {"t": 110.0, "pid": 1, "step": "preflight", "since_start_s": 12.0},
               {"t": 111.0, "pid": 1, "step": "launch", "since_start_s": 13.0},
               {"t": 115.0, "pid": 2, "step": "job", "since_start_s": 3.5},
               {"t": 115.5, "pid": 3, "step": "worker", "since_start_s": 0.5},
               {"t": 117.0, "pid": 3, "step": "ready", "since_start_s": 2.0},
               {"t": 118.0, "pid": 2, "step": "point", "since_start_s": 6.5},
               {"t": 130.0, "pid": 2, "step": "row", "since_start_s": 18.5},
               {"t": 131.0, "pid": 1, "step": "done", "since_start_s": 33.0}]
    s = phases.summary(records)
    assert s == {"preflight": 12.0, "launch": 1.0, "to_first_point": 7.0, "points": 12.0, "tail": 1.0, "exit": None,
                 "fixed": 21.0, "job_start": 3.5, "worker_start": 2.0}
    assert phases.summary(records, start=97.0, end=133.5) == {**s, "preflight": 13.0, "exit": 2.5, "fixed": 24.5}


def test_phase_log_is_off_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv(phases.ENV, raising=False)
    phases.mark("cli")  # nothing to write to
    monkeypatch.setenv(phases.ENV, str(tmp_path / "p.jsonl"))
    phases.mark("cli", x=1)
    (line,) = (tmp_path / "p.jsonl").read_text().splitlines()
    assert json.loads(line)["step"] == "cli" and json.loads(line)["x"] == 1


def test_the_early_key_check_composes_a_swept_key_with_its_first_value():
    """`seq=1024,4096` was checked as `seq=null`, which an int key refuses: the early check gave up and left it to
    the full preflight (after importing the designs)."""
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        assert sweep.check_keys_early(["seq=128,256", "head_dim=64", "causal=true,false"])
        assert sweep.check_keys_early(["seq=range(128,130)", "dtype=fp16,bf16"])
        assert not sweep.check_keys_early(["seq=a,b"])  # not an int: the full preflight says so
        with pytest.raises(sweep.ConfigError, match="did you mean 'head_dim'"):
            sweep.check_keys_early(["seq=128,256", "hed_dim=64"])


PROBE = """
import os
import runners.sweep
from runners.isolation import isolate
print(isolate.worker_pid() is not None, os.environ.get("FLASH_BWD_PRESTART"))
isolate.shutdown()
"""


@pytest.mark.parametrize("start, started", [("spawn", True), ("", False)])
def test_a_job_process_told_by_its_sweep_process_prestarts_at_import(start, started):
    """FLASH_BWD_PRESTART (set by the sweep process for its job processes): importing the runner starts the worker,
    before the runner's own imports, and takes the variable out of the environment (a spawned worker runs the module
    again and must not start one of its own). Without a CUDA driver (this machine) only the spawn path starts one."""
    run = subprocess.run([sys.executable, "-c", PROBE], cwd=env.REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRITON_INTERPRET": "1", sweep.PRESTART_ENV: "[]",
                              isolate.START_ENV: start})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [str(started), "None"]


def test_early_job_processes_only_for_several_jobs(monkeypatch):
    from omegaconf import OmegaConf

    from hydra_plugins import flash_bwd_local

    cfg = {"_target_": "hydra_plugins.flash_bwd_local.FlashBwdLocalLauncher", "backend": "loky",
           "prefer": "processes", "pre_dispatch": "n_jobs", "batch_size": 1}
    assert flash_bwd_local.start_job_processes(OmegaConf.create({**cfg, "n_jobs": 1}), [], True,
                                               "runners.sweep") is None
    monkeypatch.setenv(flash_bwd_local.EARLY_ENV, "0")
    assert flash_bwd_local.start_job_processes(OmegaConf.create({**cfg, "n_jobs": 2}), [], True,
                                               "runners.sweep") is None
