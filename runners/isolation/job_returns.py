"""What became of a job that ran in another process (a loky worker of hydra/launcher=local_gpus, a Slurm array
task), accounted for in the process that launched it: its row goes to the summary, or it is a point not recorded.

`runners.sweep.main` returns {"written": [path], "found": [path], "pid": pid} or {"lost": reason, "pid": pid}; the
launcher hands each job's JobReturn to `account`, so that the count of points not recorded (exit status 4) and
the summary's "already on disk" hold however the jobs ran.
"""
import os

from hydra.core.utils import JobReturn, JobStatus

from runners.sweep_state import note_lost, run_state


def account(ret, prefix: str, lost: str | None = None, where: str = "job", echoed: bool = False) -> None:
    """One job's outcome in this process. `lost`: the launcher's own reason (e.g. a cancelled Slurm job).
    `echoed`: the job's stderr is this terminal's (loky workers), so its own line was seen and is not repeated.
    A job that ran in this process (joblib with one job) has counted itself already."""
    from runners.tables import results

    value = ret._return_value if isinstance(ret, JobReturn) and ret.status == JobStatus.COMPLETED else None
    if isinstance(value, dict) and value.get("pid") == os.getpid():
        return
    if lost is None and isinstance(ret, JobReturn) and ret.status == JobStatus.FAILED:
        lost = f"{where} raised: {type(ret._return_value).__name__}: {ret._return_value}"
    if lost is None and ret is None:
        lost = f"{where} returned nothing"
    if lost is None and isinstance(value, dict) and value.get("lost"):
        if echoed:  # the job printed its own line on this terminal: count it here, quietly
            run_state["lost"].append(value["lost"])
            return
        lost = f"{where}: {value['lost']}"
    if lost is not None:
        note_lost(f"{prefix}: point not recorded: {lost}", lost)
        return
    if isinstance(value, dict):
        results.note_session(value.get("written", ()), value.get("found", ()))


def completed(ret, overrides) -> JobReturn:
    """The JobReturn handed back to Hydra's sweeper: COMPLETED always (it raises on a failed one; the count and
    the summary come instead)."""
    if isinstance(ret, JobReturn) and ret.status == JobStatus.COMPLETED:
        return ret
    return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=None)
