"""The state of the current sweep run (runners.sweep.cli's), in a module of its own: the sweep, its callback and the
launchers that account for jobs run in other processes (hydra_plugins/flash_bwd_local, flash_bwd_slurm,
runners/isolation/job_returns.py) all read and write this one dict, however `runners.sweep` was started.
"""
import os
import sys

# jobs of the current run (cli()'s preflight); crashed/timeout rows; why each point not recorded was lost
run_state = {"total": None, "faults": 0, "lost": []}


def note_lost(line: str, reason: str) -> dict:
    """A point whose row was not written: one line on stderr, its reason counted for runners.sweep.cli's exit status
    EXIT_LOST (also for the launcher of jobs run elsewhere: hydra_plugins/flash_bwd_slurm)."""
    print(line, file=sys.stderr)
    run_state["lost"].append(reason)
    return {"lost": reason, "pid": os.getpid()}
