"""Every launcher config composes (Hydra's compose API); the Slurm one builds the sbatch script it should;
a local_gpus multirun runs end to end on the CPU interpreter (two loky workers), each point once."""
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate

from runners import sweep  # runners.sweep registers the schema and the resolver
from runners.point import env
from runners.isolation import lease
from runners.tables import results

pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="pip install -e '.[scale]'")
pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[scale]'")

LAUNCHERS = sorted(p.stem for p in (env.CONF_DIR / "hydra" / "launcher").glob("*.yaml"))
TINY = ["seq=17,33", "head_dim=16", "batch=1", "heads=2", "dtype=fp32", "bench.cpu_warmup=0", "bench.cpu_rep=1",
        "variant=atomic", "blocks.BLOCK_M=16", "causal=true,false"]


@pytest.fixture
def hydra_conf():
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        yield


def test_the_launchers_are_there():
    assert LAUNCHERS == ["local_gpus", "slurm"]


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_composes_with_the_sweep(name, hydra_conf):
    cfg = compose("config", [f"hydra/launcher={name}"], return_hydra_config=True)
    assert cfg.hydra.runtime.choices["hydra/launcher"] == name
    assert cfg.variant.name == "two_pass" and cfg.gpu.index == 0  # the job's config is untouched


@pytest.mark.parametrize("name", LAUNCHERS)
def test_sweep_preflight_accepts_the_launcher(name):
    assert sweep.preflight([f"hydra/launcher={name}", "seq=17,33", "head_dim=16"], multirun=True) == 2


def test_local_gpus_is_joblib_with_one_job_per_gpu(monkeypatch, hydra_conf):
    monkeypatch.setenv(lease.NUM_GPUS_ENV, "8")
    launcher = compose("config", ["hydra/launcher=local_gpus"], return_hydra_config=True).hydra.launcher
    assert launcher._target_ == "hydra_plugins.flash_bwd_local.FlashBwdLocalLauncher"  # joblib's, accounted
    assert (launcher.n_jobs, launcher.backend, launcher.prefer, launcher.batch_size) == (8, "loky", "processes", "1")
    monkeypatch.delenv(lease.NUM_GPUS_ENV)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    launcher = compose("config", ["hydra/launcher=local_gpus"], return_hydra_config=True).hydra.launcher
    assert launcher.n_jobs == 2
    launcher = compose("config", ["hydra/launcher=local_gpus", "hydra.launcher.n_jobs=3"],
                       return_hydra_config=True).hydra.launcher
    assert launcher.n_jobs == 3


def test_basic_launcher_stays_the_default(hydra_conf):
    cfg = compose("config", return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("BasicLauncher")


def test_slurm_fields(hydra_conf):
    cfg = compose("config", ["hydra/launcher=slurm", "hydra.launcher.partition=h100"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.flash_bwd_slurm._launcher.FlashBwdSlurmLauncher"  # submitit's, bounded
    assert (launcher.partition, launcher.gpus_per_node, launcher.tasks_per_node, launcher.nodes) == ("h100", 1, 1, 1)
    assert launcher.timeout_min > 0 and launcher.array_parallelism > 0
    assert "unset TRITON_INTERPRET" in launcher.setup


def test_slurm_sbatch_script(tmp_path, monkeypatch, hydra_conf):
    """The submitit launcher's own code path up to submission: the sbatch script it would submit."""
    import submitit
    import submitit.slurm.slurm as slurm

    class Submitted(Exception):
        pass

    def map_array(self, fn, *args):
        raise Submitted(self, args)

    monkeypatch.setattr(submitit.AutoExecutor, "map_array", map_array)
    monkeypatch.setattr(slurm.SlurmExecutor, "affinity", classmethod(lambda cls: 1))  # "srun" found
    cfg = compose("config", ["hydra/launcher=slurm", "hydra.launcher.partition=a100", "hydra.launcher.timeout_min=30",
                             f"hydra.sweep.dir={tmp_path}"], return_hydra_config=True)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # restored after the test
    HydraConfig.instance().set_config(cfg)
    launcher = instantiate(cfg.hydra.launcher)
    launcher.setup(hydra_context=None, task_function=sweep.main, config=cfg)
    with pytest.raises(Submitted) as info:
        launcher.launch([["seq=1024"], ["seq=2048"], ["seq=4096"]], initial_job_idx=0)
    executor, args = info.value.args
    assert [list(a) for a in args[0]] == [["seq=1024"], ["seq=2048"], ["seq=4096"]]  # one array task per point
    script = executor._executor._make_submission_file_text("python -m x", "uid")
    for line in ("#SBATCH --partition=a100", "#SBATCH --gpus-per-node=1", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --time=30", "#SBATCH --job-name=flash-bwd", "unset TRITON_INTERPRET"):
        assert line in script


@pytest.mark.skipif(not env.interpreting(), reason="the CPU interpreter path")
def test_local_gpus_multirun_end_to_end(tmp_path):
    """`hydra/launcher=local_gpus` with two loky workers: every point once, one sweep_id, the summary."""
    run = subprocess.run(
        [sys.executable, "-m", "runners.sweep", "-m", "hydra/launcher=local_gpus", "hydra.launcher.n_jobs=2", *TINY,
         f"results_dir={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / 'mr'}"],
        cwd=env.REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in run.stdout + run.stderr
    df = results.load(tmp_path / "results")
    assert len(df) == 4 and df.config_key.is_unique and df.sweep_id.nunique() == 1
    assert sorted(df.point_index) == [0, 1, 2, 3] and (df.status == "ok").all()
    assert df.gpu_index.isna().all() and "cuda_visible_devices" in df  # no GPU leased on the CPU
    assert f"sweep {df.sweep_id.iloc[0]}: 4 rows" in run.stdout


def test_local_gpus_with_isolation_on_every_point_ok(tmp_path):
    """The isolated worker of a loky job process starts (it died at start with "cannot find context for 'loky'"
    on 2026-11-25, every point `crashed`)."""
    run = subprocess.run(
        [sys.executable, "-m", "runners.sweep", "-m", "hydra/launcher=local_gpus", "hydra.launcher.n_jobs=2",
         "isolate=true", *TINY[:-1], "causal=false", f"results_dir={tmp_path / 'results'}",
         f"hydra.sweep.dir={tmp_path / 'mr'}"],
        cwd=env.REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    df = results.load(tmp_path / "results")
    assert len(df) == 2 and (df.status == "ok").all(), df[["status", "reason"]]


def test_local_gpus_counts_a_point_lost_in_a_job_process(tmp_path):
    """A row that cannot be written in a loky job process (a full disk there) is counted by the sweep: the count
    line and exit status 4 (before: exit 0, no count; the tally stayed in the job process)."""
    run = subprocess.run(
        [sys.executable, "-m", "runners.sweep", "-m", "hydra/launcher=local_gpus", "hydra.launcher.n_jobs=2",
         "plugins=[tests.full_disk]", "variant=two_pass,atomic", *TINY[1:7], "seq=17", "causal=false",
         f"results_dir={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / 'mr'}"],
        cwd=env.REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == sweep.EXIT_LOST, run.stdout[-2000:] + run.stderr[-3000:]
    assert "1 of 2 points not recorded: OSError: [Errno 28] No space left on device" in run.stderr
    assert run.stderr.count("point not recorded") == 1  # the job's own line, not repeated by the launcher
    df = results.load(tmp_path / "results")
    assert df.variant.tolist() == ["two_pass"] and (df.status == "ok").all()


def _spawned_worker_starts() -> bool:
    from runners.isolation import isolate

    worker = isolate.Worker(("spawn-test",), (), "spawn")
    worker.stop()
    return True


def test_a_spawned_worker_starts_inside_a_loky_process():
    """On a GPU the isolated worker is spawned; inside a loky job process the spawned child inherited the start
    method 'loky' and died at start."""
    from joblib import Parallel, delayed

    assert Parallel(n_jobs=1, backend="loky")(delayed(_spawned_worker_starts)() for _ in range(1)) == [True]


EXIT_WITH_A_WORKER = """
from joblib import Parallel, delayed
from joblib.externals.loky import get_reusable_executor
from runners.isolation import isolate

def start_and_keep():
    isolate._POOL.worker = isolate.Worker(("kept",), (), "spawn")
    return isolate._POOL.worker.process.pid

print(Parallel(n_jobs=2, backend="loky")(delayed(start_and_keep)() for _ in range(2)), flush=True)
get_reusable_executor().shutdown(wait=True)
print("shut down", flush=True)
"""


def test_a_loky_process_with_a_live_worker_exits():
    """A loky job process ends in multiprocessing's exit function, which joins its children: a live isolated worker
    (the GPU's, kept between points) made it wait forever, so every local_gpus sweep on a GPU hung after its summary."""
    run = subprocess.run([sys.executable, "-c", EXIT_WITH_A_WORKER], cwd=env.REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and "shut down" in run.stdout, run.stderr[-2000:]
