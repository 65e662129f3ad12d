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

            from runners import sweep
            from runners.isolation import job_returns

            rets = super().launch(job_overrides, initial_job_idx)
            total = sweep.run_state.get("total") or len(job_overrides)
            for i, (ret, overrides) in enumerate(zip(rets, job_overrides)):
                prefix = f"[{initial_job_idx + i + 1}/{total}] {' '.join(filter_overrides(overrides))}"
                job_returns.account(ret, prefix, echoed=True)
            return [job_returns.completed(ret, o) for ret, o in zip(rets, job_overrides)]
