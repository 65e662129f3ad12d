"""Claims on points: a point is claimed before it is measured, so two sweeps of the same point into one results
folder measure it once (issue 39). results.find_done claims a point it finds no row for; results.write_row
releases the claim once the row is written (or fails to be).

A claim is an exclusive POSIX lock (`fcntl.lockf`, the kind of lock NFS supports) on
`<results_dir>/<gpu>/.claim-<resume key>`. The kernel drops it when its process dies, so a crashed sweep never
holds a point. A released claim's file is removed; a waiter that locked a removed file tries again.
"""
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # no POSIX locks (Windows): points are not claimed
    fcntl = None

_held: dict[str, tuple[int, Path]] = {}  # resume key -> (descriptor, claim file) of the claims this process holds


def claim_path(base: Path, key: str) -> Path:
    return Path(base) / f".claim-{key}"


def claim(base: Path, key: str, note=None) -> bool:
    """Claims resume key `key` under `base` (<results_dir>/<gpu>) for this process; while another process holds
    it, says so once through `note` and waits. True when it waited (the other process may have written the row)."""
    if fcntl is None or key in _held:
        return False
    path = claim_path(base, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # EAGAIN / EACCES: held by another process
                if not waited:
                    (note or _say)(f"waiting: another sweep is measuring this point ({path})")
                waited = True
                fcntl.lockf(fd, fcntl.LOCK_EX)
            if _same_file(fd, path):
                _held[key] = fd, path
                return waited
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder released it and removed the file: claim the new one


def _say(line: str) -> None:
    print(line, flush=True)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def release(key: str) -> None:
    """Releases this process's claim on `key`, if it holds one: the file is removed, then the lock dropped."""
    fd, path = _held.pop(key, (None, None))
    if fd is None:
        return
    try:
        path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def release_all() -> None:
    """Releases every claim this process holds (a point that ended without a row, e.g. a runner error)."""
    for key in list(_held):
        release(key)
