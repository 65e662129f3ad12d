"""A Slurm job that ends without a result (cancelled, failed, timed out) is accounted like a local point not
recorded (issue 29): one line with its job id, the summary still printed, exit status 4; and the wait for the
array is bounded even without Slurm accounting. No Slurm needed: submitit's jobs are faked.
The real thing, on a one-node Slurm: scripts/slurm_smoke.sh (docs/scaling.md)."""
import sys
from types import SimpleNamespace

import pytest
from hydra.core.global_hydra import GlobalHydra

from runners import sweep
from runners.point import env
from runners.tables import results
from runners.isolation import slurm_jobs

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[scale]'")
SMALL = ["seq=64", "batch=1", "heads=1", "head_dim=16", "dtype=fp16", "bench.cpu_warmup=0", "bench.cpu_rep=1"]


class UncompletedJobError(Exception):  # named as submitit's
    pass


class FakeJob:
    """A submitit job: `state` as sacct would say it (None: no accounting), a result file once it ran."""

    def __init__(self, job_id, folder, state=None, result=None):
        self.job_id = job_id
        self.sacct_state = state
        self.result = result
        self.paths = SimpleNamespace(result_pickle=folder / f"{job_id}_result.pkl", stderr=folder / f"{job_id}.err")
        self.watcher = SimpleNamespace(get_state=lambda job_id, mode="standard": self.state)
        if result is not None:
            self.paths.result_pickle.write_text("done")

    @property
    def state(self):
        return self.sacct_state or "UNKNOWN"

    def done(self, force_check=False):
        return self.paths.result_pickle.exists() or self.state not in ("UNKNOWN", "PENDING", "RUNNING")

    def results(self):
        if not self.paths.result_pickle.exists():
            raise UncompletedJobError(f"Job {self.job_id} has not produced any output (state: {self.state})")
        return [self.result]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_cancelled_and_vanished_jobs_are_lost_lines_and_the_wait_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_jobs, "_sacct_answers", lambda job_id: job_id != "7_2")  # 7_2: no accounting
    clock = Clock()
    jobs = [FakeJob("7_0", tmp_path, result="row"), FakeJob("7_1", tmp_path, state="CANCELLED by 0"),
            FakeJob("7_2", tmp_path, state=None), FakeJob("7_3", tmp_path, state="TIMEOUT"),
            FakeJob("7_4", tmp_path, state=None), FakeJob("7_5", tmp_path, state="PENDING")]

    def queued():  # 7_2 is in the queue for the first 10 s, then gone, and sacct never knows of it
        if clock.now < 10:
            return {"7_2": "RUNNING", "7_4": "RUNNING", "7_5": "PENDING"}
        return {"7_4": "FAILED"}  # the controller still knows how 7_4 ended; 7_5 was cancelled while pending

    outcomes = slurm_jobs.collect(jobs, queue=queued, poll_s=1, grace_s=5, clock=clock, sleep=clock.sleep)
    assert [o.result for o in outcomes] == ["row", None, None, None, None, None]
    assert outcomes[1].lost.startswith("Slurm job 7_1 CANCELLED by 0, no result (log: ")
    assert outcomes[2].lost.startswith("Slurm job 7_2 left the queue (state unknown: no Slurm accounting, sacct)")
    assert outcomes[3].lost.startswith("Slurm job 7_3 TIMEOUT, no result")
    assert outcomes[4].lost.startswith("Slurm job 7_4 FAILED, no result")
    assert outcomes[5].lost.startswith("Slurm job 7_5 left the queue before it ran (cancelled while pending?; "
                                       "sacct's last state: PENDING), no result")
    assert 15 <= clock.now < 20  # gone at 10 s, + the 5 s grace: no endless wait for an UNKNOWN state


def test_the_wait_ends_when_squeue_stops_answering(tmp_path):
    clock = Clock()
    jobs = [FakeJob("8_0", tmp_path)]
    outcomes = slurm_jobs.collect(jobs, queue=lambda: None, poll_s=10, unreachable_s=60, clock=clock,
                                  sleep=clock.sleep)
    assert "squeue did not answer" in outcomes[0].lost and clock.now == 60


@pytest.fixture
def fake_slurm(monkeypatch, tmp_path):
    """submitit's executor runs each array task here, in this process, except those named in `cancel`
    (their jobs end CANCELLED without a result, as after scancel)."""
    import submitit
    import submitit.slurm.slurm as slurm

    cancel = set()

    def map_array(self, fn, *args):
        jobs = []
        for task, call in enumerate(zip(*args)):
            job_id = f"42_{task}"
            if task in cancel:
                jobs.append(FakeJob(job_id, tmp_path, state="CANCELLED by 0"))
                continue
            monkeypatch.setattr(submitit, "JobEnvironment", lambda: SimpleNamespace(job_id=job_id))
            jobs.append(FakeJob(job_id, tmp_path, state="COMPLETED", result=fn(*call)))
        return jobs

    monkeypatch.setattr(submitit.AutoExecutor, "map_array", map_array)
    monkeypatch.setattr(slurm.SlurmExecutor, "affinity", classmethod(lambda cls: 1))  # "srun" found, on CI too
    monkeypatch.setattr(slurm_jobs, "queue_states", lambda: {})
    monkeypatch.setattr(slurm_jobs, "POLL_S", 0.01)
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", ["runners/sweep.py"])
    yield cancel
    GlobalHydra.instance().clear()


def run_cli(argv, tmp_path, capsys):
    code = 0
    try:
        sweep.cli(["-m", "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=null", *SMALL, *argv,
                   f"results_dir={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
                   "sweep_id=smoke"])
    except SystemExit as exc:
        code = exc.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")
def test_a_cancelled_slurm_job_is_counted_and_the_summary_prints(fake_slurm, tmp_path, capsys):
    fake_slurm.add(1)
    code, out, err = run_cli(["causal=true,false"], tmp_path, capsys)
    assert code == sweep.EXIT_LOST == 4, err
    assert "Traceback" not in err and "UncompletedJobError" not in err
    lines = [ln for ln in err.splitlines() if "Slurm job" in ln]
    assert len(lines) == 2, err  # the job's line and the count
    assert lines[0].startswith("[2/2] causal=False: point not recorded: Slurm job 42_1 CANCELLED by 0, no result")
    assert lines[1].startswith("1 of 2 points not recorded: Slurm job 42_1 CANCELLED by 0")
    assert "sweep smoke: 1 rows (1 ok)" in out
    assert len(results.load(tmp_path / "results")) == 1

    # the rerun measures the missing point; the summary counts the one already on disk
    fake_slurm.clear()
    code, out, err = run_cli(["causal=true,false"], tmp_path, capsys)
    assert code == 0, err
    assert "sweep smoke: 2 rows (1 already on disk, 1 new; 2 ok)" in out
    assert "plot: python -m plots.compare results=" in out and "dtype=fp16" in out
