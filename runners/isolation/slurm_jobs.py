"""Waiting for the jobs of a Slurm array without waiting forever, and saying which ones ended without a result
(issue 29). Used by the Slurm launcher (hydra_plugins/flash_bwd_slurm); knows nothing of Hydra.

submitit's own wait (`job.results()`) asks `sacct` for a job's state. Without Slurm accounting the state stays
UNKNOWN and it waits forever for a job that was cancelled. Here a job is finished when its result file exists,
when sacct says it ended, or when it has been gone from the queue (`squeue`) for `grace_s` without a result.
A finished job without a result (cancelled, failed, timed out, node failure) is an Outcome with `lost` set:
one line naming its Slurm job id and state.
"""
import getpass
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

POLL_S = 2.0
GRACE_S = 30.0  # a job gone from squeue may take this long to show its result file (shared file systems)
UNREACHABLE_S = 600.0  # squeue failing for this long: stop waiting; the jobs still out are not recorded


@dataclass
class Outcome:
    job_id: str
    result: Any = None  # the job's return value (one Hydra JobReturn), when the job ran to its end
    lost: str | None = None  # else why: "Slurm job 12_3 CANCELLED by 0, no result (log: ...)"


# states of a job still in the queue (squeue); any other state is an end state
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
          "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "UNKNOWN"}


def queue_states() -> dict[str, str] | None:
    """State of each of this user's jobs the controller still holds (array tasks as '<id>_<task>'): the ones
    in the queue, and the ones that ended in the last few minutes (MinJobAge), with their end state, which
    needs no accounting. None when squeue fails."""
    try:
        run = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", "-u", getpass.getuser()],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if run.returncode != 0:
        return None
    return dict(line.split("|", 1) for line in run.stdout.split() if "|" in line)


def collect(jobs: list, *, on_done: Callable | None = None, queue: Callable[[], set | None] | None = None,
            poll_s: float | None = None, grace_s: float | None = None, unreachable_s: float | None = None,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> list:
    """One Outcome per submitit job, in order; returns when every job has finished (see the module doc).
    `on_done(i, outcome)` is called as each job finishes. Unset arguments: this module's values."""
    queue = queue or queue_states
    poll_s = POLL_S if poll_s is None else poll_s
    grace_s = GRACE_S if grace_s is None else grace_s
    unreachable_s = UNREACHABLE_S if unreachable_s is None else unreachable_s
    outcomes: dict[int, Outcome] = {}
    gone_since: dict[int, float] = {}
    ended: dict[int, str] = {}  # end states the controller gave (squeue -t all)
    queue_answered = clock()
    while len(outcomes) < len(jobs):
        states = queue()
        now = clock()
        if states is not None:
            queue_answered = now
        for i, job in enumerate(jobs):
            if i in outcomes:
                continue
            state = None if states is None else states.get(str(job.job_id))
            if state in ACTIVE:
                gone_since.pop(i, None)
            elif states is not None:
                gone_since.setdefault(i, now)
                if state:
                    ended[i] = state
            left = i in gone_since and now - gone_since[i] >= grace_s
            if _has_result(job) or left or now - queue_answered >= unreachable_s or _done(job):
                outcomes[i] = outcome(job, unreachable=not left and now - queue_answered >= unreachable_s,
                                      controller_state=ended.get(i))
                if on_done is not None:
                    on_done(i, outcomes[i])
        if len(outcomes) < len(jobs):
            sleep(poll_s)
    return [outcomes[i] for i in range(len(jobs))]


def outcome(job, unreachable: bool = False, controller_state: str | None = None) -> Outcome:
    """A finished job's result, or the one line that says why it has none. Never waits for an unknown state."""
    job_id = str(job.job_id)
    if _has_result(job) or _done(job):
        try:
            return Outcome(job_id, result=job.results()[0])
        except Exception as exc:  # noqa: BLE001 - submitit's UncompletedJobError / FailedJobError, as one line
            if type(exc).__name__ == "FailedJobError":
                return Outcome(job_id, lost=f"Slurm job {job_id} raised: {_last_line(exc)} (log: {_log(job)})")
    if unreachable:
        return Outcome(job_id, lost=f"Slurm job {job_id}: squeue did not answer for {UNREACHABLE_S:.0f} s, "
                                    f"stopped waiting (log: {_log(job)})")
    return Outcome(job_id, lost=f"Slurm job {job_id} {_state(job, controller_state)}, no result (log: {_log(job)})")


def _has_result(job) -> bool:
    try:
        return job.paths.result_pickle.exists()
    except Exception:  # noqa: BLE001
        return False


def _done(job) -> bool:
    """sacct says the job ended (False while its state is unknown: then the queue decides)."""
    try:
        return bool(job.done())
    except Exception:  # noqa: BLE001 - sacct missing or failing
        return False


def _state(job, controller_state: str | None = None) -> str:
    """The job's end state: sacct's (asked now: submitit's watcher asks at most once a minute), else the
    controller's; a task cancelled before it started has neither."""
    try:
        state = str(job.watcher.get_state(str(job.job_id), mode="force"))
    except Exception:  # noqa: BLE001
        state = "UNKNOWN"
    if state.split()[0].upper() not in ACTIVE:
        return state
    if controller_state:
        return controller_state
    if not _sacct_answers(str(job.job_id)):
        return "left the queue (state unknown: no Slurm accounting, sacct)"
    return f"left the queue before it ran (cancelled while pending?; sacct's last state: {state})"


def _sacct_answers(job_id: str) -> bool:
    try:
        run = subprocess.run(["sacct", "-n", "-X", "-j", job_id.split("_")[0]], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return run.returncode == 0


def _log(job) -> str:
    try:
        return str(job.paths.stderr)
    except Exception:  # noqa: BLE001
        return "?"


def _last_line(exc: BaseException) -> str:
    """The exception line of the job's traceback inside submitit's FailedJobError text."""
    text = str(exc).split("----------------------")
    lines = [ln.strip() for ln in (text[1] if len(text) > 2 else str(exc)).splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__
