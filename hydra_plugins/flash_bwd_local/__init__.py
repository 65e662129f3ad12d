"""flash-bwd's launcher for every GPU of one node (`hydra/launcher=local_gpus`, conf/hydra/launcher/local_gpus.yaml):
Hydra's joblib launcher, whose jobs run in loky worker processes, plus the accounting of each job in the process
that launched them (runners/isolation/job_returns.py). Without it, a point whose row could not be written was
counted only in its worker process: the sweep exited 0 with no count.

Hydra imports every module under `hydra_plugins` when it starts, so this package imports nothing heavy, and
defines nothing when the joblib plugin is not installed."""
try:
    from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher as _JoblibLauncher
except ImportError:  # pip install -e ".[scale]" brings it
    _JoblibLauncher = None

if _JoblibLauncher is not None:

    class FlashBwdLocalLauncher(_JoblibLauncher):

        def launch(self, job_overrides, initial_job_idx):
            from hydra.core.utils import filter_overrides

            from runners.isolation import job_returns
            from runners.sweep_state import run_state

            rets = super().launch(job_overrides, initial_job_idx)
            total = run_state.get("total") or len(job_overrides)
            for i, (ret, overrides) in enumerate(zip(rets, job_overrides)):
                prefix = f"[{initial_job_idx + i + 1}/{total}] {' '.join(filter_overrides(overrides))}"
                job_returns.account(ret, prefix, echoed=True)
            return [job_returns.completed(ret, o) for ret, o in zip(rets, job_overrides)]


EARLY_ENV = "FLASH_BWD_EARLY_JOBS"  # 0: job processes start when Hydra launches, not during the preflight


def start_job_processes(launcher_cfg, plugins, isolated: bool, job_module: str):
    """Starts the job processes of a local_gpus multirun now, while the sweep process still composes and checks the
    points (runners.sweep.preflight): joblib's reusable loky executor, created with the arguments the launcher will
    give it (so the launcher's Parallel reuses these processes), runs one task per process that prestarts its
    isolated worker and imports `job_module`, the module of the jobs' task function (warm_job_process). Returns the
    thread to join before Hydra launches, or None (joblib not installed, one job, or FLASH_BWD_EARLY_JOBS=0)."""
    import os
    import threading

    if _JoblibLauncher is None or os.environ.get(EARLY_ENV, "1") == "0":
        return None
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(launcher_cfg, resolve=True)
    cfg.pop("_target_", None)
    cfg["backend"] = "loky"
    try:
        from hydra_plugins.hydra_joblib_launcher._core import process_joblib_cfg

        process_joblib_cfg(cfg)
    except ImportError:
        return None
    n_jobs = cfg.get("n_jobs")
    if not isinstance(n_jobs, int) or n_jobs in (0, 1):
        return None

    def run():
        from joblib import Parallel, delayed

        try:
            Parallel(**cfg)(delayed(warm_job_process)(tuple(plugins), isolated, job_module)
                            for _ in range(max(n_jobs, 1)))
        except Exception:  # noqa: BLE001 - an early start is only a head start: the launch starts them as before
            pass

    thread = threading.Thread(target=run, name="flash-bwd-early-jobs", daemon=True)
    thread.start()
    return thread


def warm_job_process(plugins: tuple, isolated: bool, job_module: str) -> int:
    """A local_gpus job process's first task, sent while the sweep process checks the points (start_job_processes):
    prestart the isolated worker (with isolation on), then import what a job imports (`job_module`: torch, Triton,
    the designs come with it), both at once. Its pid."""
    import importlib
    import os

    from runners import phases
    from runners.isolation import isolate

    phases.mark("warm")
    if isolated:
        isolate.prestart_plugins(plugins)
    importlib.import_module(job_module)
    return os.getpid()
