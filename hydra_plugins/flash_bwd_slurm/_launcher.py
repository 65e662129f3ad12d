"""FlashBwdSlurmLauncher: submitit's Slurm launcher with a bounded wait and per-job accounting (see __init__)."""
import logging
import os
from pathlib import Path
from typing import Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf

log = logging.getLogger(__name__)


class FlashBwdSlurmLauncher(SlurmLauncher):

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """As submitit's SlurmLauncher.launch (hydra-submitit-launcher 1.2), then `_collect` instead of
        waiting on each job's results()."""
        import submitit

        assert self.config is not None
        assert len(job_overrides) > 0
        params = self.params
        init_params = {"folder": params["submitit_folder"]}
        specific_init_keys = {"max_num_timeout"}
        init_params.update(**{f"{self._EXECUTOR}_{x}": y for x, y in params.items() if x in specific_init_keys})
        init_keys = specific_init_keys | {"submitit_folder"}
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init_params)
        baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{x if x in baseparams else f"{self._EXECUTOR}_{x}": y
                                      for x, y in params.items() if x not in init_keys})

        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {self.config.hydra.sweep.dir}")
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))

        job_params = []
        for idx, overrides in enumerate(job_overrides):
            idx = initial_job_idx + idx
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))

        jobs = executor.map_array(self, *zip(*job_params))
        return collect(jobs, job_overrides, initial_job_idx)


def collect(jobs, job_overrides, initial_job_idx: int, **wait) -> list[JobReturn]:
    """Waits for the jobs (runners.isolation.slurm_jobs.collect) and accounts for each in this process: a row written
    or found goes to the summary, a job without a result is runners.sweep_state.note_lost's line. Every job is
    returned as COMPLETED (Hydra's sweeper raises on a failed one: the summary and the count come instead)."""
    from runners.isolation import job_returns, slurm_jobs
    from runners.sweep_state import run_state

    total = run_state.get("total") or len(jobs)
    shared = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()

    def account(i: int, outcome) -> None:
        point = " ".join(o for o in filter_overrides(job_overrides[i]) if o not in shared)  # what differs
        prefix = f"[{initial_job_idx + i + 1}/{total}] {point}".rstrip()
        job_returns.account(outcome.result, prefix, outcome.lost, where=f"Slurm job {outcome.job_id}")

    outcomes = slurm_jobs.collect(jobs, on_done=account, **wait)
    return [job_returns.completed(outcome.result, job_overrides[i]) for i, outcome in enumerate(outcomes)]
