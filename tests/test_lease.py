"""GPU leases without a GPU: processes contending for fake devices' lock files wait, never share, and never
hold more leases than there are devices; locks die with their process; the sweep takes one per job."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from omegaconf import OmegaConf

from runners import sweep
from runners.point import env
from runners.isolation import lease

REPO = env.REPO

# One contender: takes a lease among `n` fake devices, holds it `hold` seconds, logs (device, start, end).
HOLDER = textwrap.dedent("""
    import json, os, sys, time
    from runners.isolation import lease
    n, hold, log, go = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
    devices = [lease.Device(i, i, f"fake{i}") for i in range(n)]
    print("ready", flush=True)
    while not os.path.exists(go):  # every contender starts at once
        time.sleep(0.01)
    with lease.acquire(devices, poll_s=0.05) as held:
        start = time.time()
        time.sleep(hold)
        end = time.time()
    with open(log, "a") as f:
        f.write(json.dumps({"device": held.index, "start": start, "end": end, "waited": held.waited_s}) + "\\n")
""")


def contend(tmp_path, devices: int, holders: int, hold: float) -> tuple[list[dict], list[str]]:
    """Starts `holders` processes at once on `devices` fake GPUs; their logs and stderr."""
    log = tmp_path / "holds.jsonl"
    environ = {**os.environ, lease.LOCK_DIR_ENV: str(tmp_path / "locks")}
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, str(devices), str(hold), str(log), str(go)], cwd=REPO,
                              env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(holders)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.communicate()
    go.touch()
    errs = []
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        errs.append(err)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == holders
    return rows, errs


def most_at_once(rows: list[dict]) -> int:
    events = sorted([(r["start"], 1) for r in rows] + [(r["end"], -1) for r in rows])  # an end sorts first
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def assert_no_device_shared(rows: list[dict]) -> None:
    for device in {r["device"] for r in rows}:
        spans = sorted((r["start"], r["end"]) for r in rows if r["device"] == device)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans


def test_one_device_second_job_waits(tmp_path):
    rows, errs = contend(tmp_path, devices=1, holders=2, hold=1.0)
    assert most_at_once(rows) == 1
    assert_no_device_shared(rows)
    assert max(r["waited"] for r in rows) > 0.5  # the second one waited for the first
    waiting = [e for e in errs if "waiting for a free GPU" in e]
    assert len(waiting) == 1 and waiting[0].count("waiting for a free GPU") == 1  # one line, not one per poll
    assert "pid " in waiting[0] and "GPU lease: got GPU 0" in waiting[0]  # names the holder; says when it got it


def test_two_devices_two_jobs_run_concurrently(tmp_path):
    rows, errs = contend(tmp_path, devices=2, holders=2, hold=2.0)
    assert sorted(r["device"] for r in rows) == [0, 1]
    assert most_at_once(rows) == 2
    assert not any("waiting" in e for e in errs)


def test_never_more_holders_than_devices(tmp_path):
    rows, _ = contend(tmp_path, devices=2, holders=5, hold=0.5)
    assert most_at_once(rows) == 2
    assert_no_device_shared(rows)


def test_lock_is_released_when_its_process_is_killed(tmp_path):
    script = textwrap.dedent("""
        import sys, time
        from runners.isolation import lease
        held = lease.acquire([lease.Device(0, 0, "fake0")], directory=sys.argv[1])
        print("held", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert lease.try_lock(lease.lock_path("fake0", tmp_path)) is None  # taken by the other process
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    fd = lease.try_lock(lease.lock_path("fake0", tmp_path))
    assert fd is not None
    os.close(fd)


def test_in_process_leases_exclude_each_other(tmp_path):
    devices = [lease.Device(i, i, f"fake{i}") for i in range(2)]
    with lease.acquire(devices, directory=tmp_path) as first, lease.acquire(devices, directory=tmp_path) as second:
        assert {first.index, second.index} == {0, 1}
        assert lease.try_lock(lease.lock_path("fake0", tmp_path)) is None
    fd = lease.try_lock(lease.lock_path("fake0", tmp_path))  # released on exit
    assert fd is not None
    os.close(fd)


def test_pinned_index_waits_for_that_gpu_only(tmp_path, monkeypatch):
    monkeypatch.setenv(lease.LOCK_DIR_ENV, str(tmp_path))
    devices = [lease.Device(i, i, f"fake{i}") for i in range(2)]
    with lease.gpu_lease(1, devices=devices) as held:
        assert held.index == 1
        assert lease.try_lock(lease.lock_path("fake1", tmp_path)) is None
        fd = lease.try_lock(lease.lock_path("fake0", tmp_path))  # device 0 stays free
        assert fd is not None
        os.close(fd)
    with pytest.raises(ValueError, match="2 CUDA device"):
        lease.gpu_lease(2, devices=devices)


def test_auto_prefers_the_device_used_last(tmp_path, monkeypatch):
    monkeypatch.setitem(lease._last_used, "lock_id", None)
    devices = [lease.Device(i, i, f"fake{i}") for i in range(3)]
    with lease.acquire(devices, directory=tmp_path), lease.acquire(devices, directory=tmp_path) as second:
        pass
    with lease.acquire(devices, directory=tmp_path) as again:
        assert again.index == second.index == 1


@pytest.mark.parametrize("visible, count, expected", [
    (None, 3, [0, 1, 2]), ("2,3", 2, [2, 3]), ("3, 1", 2, [3, 1]), ("GPU-1234abcd,1", 2, [None, 1]),
    ("5", 2, [5, None]),
])
def test_physical_indices(visible, count, expected):
    assert lease.physical_indices(visible, count) == expected


def test_num_gpus(monkeypatch):
    monkeypatch.setenv(lease.NUM_GPUS_ENV, "4")
    assert lease.num_gpus() == 4
    monkeypatch.delenv(lease.NUM_GPUS_ENV)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3,5")
    assert lease.num_gpus() == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert lease.num_gpus() == 1  # no GPU: one job at a time
    assert OmegaConf.create({"n": "${flash_bwd_num_gpus:}"}).n == 1


def test_sweep_job_lease(tmp_path, monkeypatch):
    """runners.sweep takes one lease per job: none on the CPU interpreter; on a GPU, gpu.index's device, or
    the first free one under a launcher that runs jobs concurrently (joblib n_jobs != 1) or gpu.index=auto."""
    cfg = OmegaConf.create({"gpu": {"index": 0}})
    basic, joblib = OmegaConf.create({"launcher": {}}), OmegaConf.create({"launcher": {"n_jobs": 2}})
    if env.interpreting():
        assert sweep.job_lease(cfg, joblib).index is None  # the CPU interpreter leases nothing
    monkeypatch.setattr(env, "interpreting", lambda: False)
    monkeypatch.setattr(lease, "visible_devices", lambda: [lease.Device(i, i, f"fake{i}") for i in range(2)])
    monkeypatch.setenv(lease.LOCK_DIR_ENV, str(tmp_path))
    with sweep.job_lease(cfg, joblib) as a, sweep.job_lease(cfg, joblib) as b:
        assert {a.index, b.index} == {0, 1}  # concurrent jobs: distinct GPUs
    with sweep.job_lease(cfg, basic) as a:
        assert a.index == 0
        with sweep.job_lease(OmegaConf.create({"gpu": {"index": "auto"}}), basic) as b:
            assert b.index == 1
    with pytest.raises(sweep.ConfigError, match="gpu.index"):
        sweep.job_lease(OmegaConf.create({"gpu": {"index": 7}}), basic)
