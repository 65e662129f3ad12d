"""GPU leases: at most one timing job on a GPU at a time, across every process of a node.

Concurrent kernels corrupt every timing, so a job takes its GPU's lease before any CUDA work and holds it
until the job ends. A lease is an exclusive `fcntl.flock` on `<lock dir>/flash-bwd-gpu-<GPU id>.lock`:

- the lock dir is `$FLASH_BWD_LOCK_DIR`, else /tmp, read when a lease is taken. Every sweep on the node
  (a multirun's jobs, a second sweep started by hand) uses the same files, so they exclude one another;
- the GPU id is the device's UUID where torch reports it, else its physical index (CUDA_VISIBLE_DEVICES
  mapped back). A UUID names the board whatever the numbering: a Slurm job whose cgroup shows its GPU as
  device 0 does not collide with the job on the node's other "device 0";
- the kernel drops the lock when the process exits, crash or kill -9 included: no stale leases.

`gpu.index=<int>` leases that device; `gpu.index=auto` (and every job under a launcher that runs several
jobs of one node at once, `hydra/launcher=local_gpus`) tries each visible GPU's lock without blocking,
the one this process used last first, and takes the first free one. With none free the job waits:
it prints one "waiting for a free GPU" line and polls; it never shares.
"""
from __future__ import annotations

import datetime
import fcntl
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

LOCK_DIR_ENV = "FLASH_BWD_LOCK_DIR"
DEFAULT_LOCK_DIR = "/tmp"
NUM_GPUS_ENV = "FLASH_BWD_NUM_GPUS"
POLL_S = 2.0
AUTO = "auto"

_last_used: dict = {"lock_id": None}  # this process's last device: auto tries it first (one CUDA context)


@dataclass(frozen=True)
class Device:
    index: int  # visible index: torch's cuda:<index>
    physical: int | None  # index on the node after the CUDA_VISIBLE_DEVICES mapping (None when it names UUIDs)
    lock_id: str  # names the lock file: "GPU-<uuid>" where known, else the physical (or visible) index


class Lease:
    """A held device (or none: the CPU interpreter); a context manager that releases on exit."""

    def __init__(self, device: Device | None, path: Path | None = None, fd: int | None = None, waited_s: float = 0.0):
        self.device, self.path, self._fd, self.waited_s = device, path, fd, waited_s

    @property
    def index(self) -> int | None:
        return None if self.device is None else self.device.index

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease({self.device}, held={self.held})"


def no_lease() -> Lease:
    """The CPU interpreter's lease: nothing to exclude (its timings are not GPU timings)."""
    return Lease(None)


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)


def lock_path(lock_id: str, directory: str | Path | None = None) -> Path:
    return Path(directory or lock_dir()) / f"flash-bwd-gpu-{lock_id}.lock"


def _open(path: Path) -> int:
    """A descriptor on the lock file, created world-writable if missing. flock works on a read-only
    descriptor too, which is what another user's file in a sticky /tmp may only give."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        for flags in (os.O_RDWR, os.O_RDONLY):
            try:
                return os.open(path, flags | os.O_CLOEXEC)
            except FileNotFoundError:
                break
            except PermissionError:
                continue
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:  # another process created it meanwhile: open that one
            continue
        try:
            os.fchmod(fd, 0o666)  # past the umask: every user's jobs share the file
        except OSError:
            pass
        return fd
    raise PermissionError(f"cannot open the GPU lock file {path}")


def try_lock(path: Path) -> int | None:
    """The descriptor holding an exclusive flock on `path`, or None when another process holds it."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    _note_holder(fd)
    return fd


def _note_holder(fd: int) -> None:
    """Writes who holds the lease into the file (for the waiting line); best effort."""
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    text = f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode()
    try:
        os.pwrite(fd, text, 0)  # then cut the rest: a reader never sees an empty file where a holder was named
        os.ftruncate(fd, len(text))
    except OSError:  # a read-only descriptor: the lock still holds
        pass


def holder(path: Path, retries: int = 5) -> str:
    """Who holds the lock file, as its holder wrote it (just after taking it: retried briefly)."""
    for attempt in range(retries):
        try:
            text = path.read_text().strip()
        except OSError:
            text = ""
        if text:
            return text
        time.sleep(0.02 * (attempt + 1))
    return "unknown"


def acquire(devices: list[Device], *, directory: str | Path | None = None, poll_s: float = POLL_S,
            out=None, what: str | None = None) -> Lease:
    """The first free device of `devices` (the last one this process used first); waits while all are held.
    Prints one waiting line (to `out`, default stderr) the first time all are busy."""
    if not devices:
        raise ValueError("no device to lease")
    directory = Path(directory or lock_dir())
    order = sorted(devices, key=lambda d: d.lock_id != _last_used["lock_id"])
    start, announced = time.monotonic(), False
    while True:
        for device in order:
            path = lock_path(device.lock_id, directory)
            fd = try_lock(path)
            if fd is not None:
                _last_used["lock_id"] = device.lock_id
                waited = time.monotonic() - start
                if announced:
                    _say(out, f"GPU lease: got GPU {_name(device)} after {waited:.0f} s")
                return Lease(device, path, fd, waited)
        if not announced:
            busy = "; ".join(f"GPU {_name(d)}: {holder(lock_path(d.lock_id, directory))}" for d in order)
            _say(out, f"waiting for a free GPU ({what or 'all visible GPUs'} busy: {busy}; locks in {directory})")
            announced = True
        time.sleep(poll_s)


def _name(device: Device) -> str:
    return str(device.physical if device.physical is not None else device.index)


def _say(out, text: str) -> None:
    if out is None:
        print(text, file=sys.stderr, flush=True)
    else:
        out(text)


# ---- CUDA devices ----------------------------------------------------------------------------------------

def physical_indices(visible: str | None, count: int) -> list[int | None]:
    """Node index of each of `count` visible devices from CUDA_VISIBLE_DEVICES (unset: the identity; an
    entry that is not an integer, a UUID or MIG id: None)."""
    if visible is None:
        return list(range(count))
    entries = [e.strip() for e in visible.split(",")]
    found: list[int | None] = []
    for entry in entries[:count]:
        try:
            found.append(int(entry))
        except ValueError:
            found.append(None)
    return found + [None] * (count - len(found))


def device_uuid(index: int) -> str | None:
    """"GPU-<uuid>" of visible device `index` (torch reports it on CUDA builds), else None."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def visible_devices() -> list[Device]:
    """Every CUDA device this process sees, with its physical index and lock id."""
    import torch

    count = torch.cuda.device_count()
    physical = physical_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), count)
    devices = []
    for index in range(count):
        try:
            uuid = device_uuid(index)
        except Exception:  # noqa: BLE001 - no UUID: the index names the lock
            uuid = None
        node_index = physical[index]
        lock_id = uuid or str(node_index if node_index is not None else index)
        devices.append(Device(index, node_index, lock_id))
    return devices


def gpu_lease(requested, *, devices: list[Device] | None = None, out=None, poll_s: float = POLL_S) -> Lease:
    """Takes the lease for `requested`: a visible device index (waits for that GPU) or "auto" (the first
    free visible GPU; waits for any)."""
    devices = visible_devices() if devices is None else devices
    if requested == AUTO:
        return acquire(devices, out=out, poll_s=poll_s)
    index = int(requested)
    match = [d for d in devices if d.index == index]
    if not match:
        raise ValueError(f"gpu.index={index}: only {len(devices)} CUDA device(s) visible")
    return acquire(match, out=out, poll_s=poll_s, what=f"GPU {_name(match[0])}")


def num_gpus() -> int:
    """GPUs a node-local launcher should run jobs on at once: $FLASH_BWD_NUM_GPUS, else the entries of
    CUDA_VISIBLE_DEVICES, else torch's device count; at least 1 (the CPU interpreter: one job at a time)."""
    value = os.environ.get(NUM_GPUS_ENV)
    if value:
        return max(1, int(value))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return max(1, len([e for e in visible.split(",") if e.strip()]))
    try:
        import torch

        return max(1, torch.cuda.device_count())
    except Exception:  # noqa: BLE001 - no CUDA: one job
        return 1


def register_resolvers() -> None:
    """`${flash_bwd_num_gpus:}` for conf/hydra/launcher/local_gpus.yaml (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("flash_bwd_num_gpus"):
        OmegaConf.register_new_resolver("flash_bwd_num_gpus", num_gpus)


register_resolvers()
