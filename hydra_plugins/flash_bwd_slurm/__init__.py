"""flash-bwd's Slurm launcher (`hydra/launcher=slurm`, conf/hydra/launcher/slurm.yaml): Hydra's submitit Slurm
launcher, except for how it waits for the array (issue 29). submitit's launcher waits on every job's
`results()`: a cancelled job ended the sweep with a traceback and no summary, and with no Slurm accounting it
waited forever. This one waits with runners/isolation/slurm_jobs.py (bounded by the queue: a job that has left it is
finished) and counts a job that ended without a result like a local point not recorded: one line with its Slurm
job id, the summary still printed, exit status 4 (runners/sweep.py).

Hydra imports every module under `hydra_plugins` when it starts, so this package imports nothing heavy (the scanner skips `_launcher`), and
defines nothing when the submitit plugin is not installed."""
try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _SubmititSlurmLauncher
except ImportError:  # pip install -e ".[scale]" brings it
    _SubmititSlurmLauncher = None

if _SubmititSlurmLauncher is not None:
    from hydra_plugins.flash_bwd_slurm._launcher import FlashBwdSlurmLauncher  # noqa: F401
