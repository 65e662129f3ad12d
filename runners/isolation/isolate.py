"""Fault isolation: each point is measured in a worker process, so a crash or a hang loses only that point.

A sticky CUDA error (illegal address, launch failure, device-side assert) leaves its process's CUDA context
dead: every later point in that process would fail. A kernel that never finishes blocks its process forever,
and a point that ends its process (a segfault, `os._exit`) would end the whole sweep. So, with `isolate` on
(the default), `call()` runs the measurement in a worker process:

- on a GPU, one persistent worker per sweep process (multiprocessing *spawn*: CUDA forbids fork after init),
  reused across points so imports, the CUDA context and Triton's in-memory kernel cache stay warm; replaced
  after a crash or a timeout, and when a point needs another GPU index or other plugins;
- a job process starts its spawned worker early (`prestart`, bound to no GPU until its first call, which comes
  after the lease), so the worker's imports overlap the job's own start;
- on the CPU interpreter, one *forked* worker per point: it inherits the imports (milliseconds, not the
  seconds of a spawn) and the caller's state as it is at that point, and there is no CUDA to forbid it;
- the parent holds the GPU lease (runners/isolation/lease.py) and writes the row: a dying worker never loses a row; the
  worker uses the leased index it is given;
- the worker dies (signal, exit, or reports a sticky CUDA error and exits) -> status `crashed`, reason = the
  first line of the error; no result within `point_timeout_s` -> the worker is killed, status `timeout`;
- the worker's stderr goes to a file that the parent copies to its own stderr after every point (and reads
  the crash line from); the worker exits by itself when its parent disappears.
"""
from __future__ import annotations

import atexit
import contextlib
import importlib
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import tempfile
import threading
import time
from multiprocessing.connection import wait

from runners.point import env

PRELOAD = ("runners.point.measure",)  # a spawned worker imports these (torch, Triton, the designs) before `ready`
STARTUP_TIMEOUT_S = 300.0  # a fresh worker's imports (not part of any point's point_timeout_s)
REAP_TIMEOUT_S = 60.0  # wait for a killed or exiting worker (a GPU context with a hung kernel takes a moment)
PARENT_POLL_S = 1.0  # the worker checks this often whether its parent is still there
_ERROR_MARKS = ("fatal python error", "error", "exception", "aborted", "segmentation fault", "killed")


def enabled(cfg) -> bool:
    """cfg.isolate: true / false, or auto = true (docs/fault_isolation.md)."""
    choice = cfg.get("isolate", "auto")
    return True if choice == "auto" else bool(choice)


START_ENV = "FLASH_BWD_WORKER_START"  # spawn or fork: how workers start, whatever the device (tests, measurements)


def start_method() -> str:
    """How a worker starts: fork on the CPU interpreter (cheap, no CUDA), spawn on a GPU. $FLASH_BWD_WORKER_START
    (spawn or fork) decides instead: `spawn` runs the GPU's path on a CPU (the tests and scripts/sweep_phases.py
    measure it there)."""
    chosen = os.environ.get(START_ENV, "").strip()
    if chosen in ("spawn", "fork"):
        return chosen
    return "fork" if env.interpreting() else "spawn"


def call(cfg, fn, *args, **kwargs) -> dict:
    """fn(*args, **kwargs) -> a row dict with `status` (e.g. measure.measure), in the worker process when
    isolation is on (fn and its arguments must pickle: a module-level function), else in this process.
    In the worker a crash or a hang returns a row with status crashed / timeout instead."""
    if not enabled(cfg):
        return fn(*args, **kwargs)
    plugins = tuple(str(m) for m in (cfg.get("plugins") or []))
    return _POOL.run(fn, args, kwargs, key=(plugins, kwargs.get("gpu_index")),
                     timeout_s=float(cfg.point_timeout_s), timer=kwargs.get("timer"))


def fault_row(status: str, reason: str, timer: str | None = None) -> dict:
    """The measurement columns of a point that crashed or timed out: empty numbers, status and reason."""
    from runners.point import measure, ncu

    return {**measure.EMPTY, "timing_meaningful": not env.interpreting(), "timer": timer,
            "status": status, "reason": reason, **ncu.EMPTY, "ncu_note": f"not profiled: point {status}"}


def prestart(cfg) -> bool:
    """With isolation on (cfg.isolate) and a spawned worker's path (a GPU): start this process's worker now, for
    the first point (Pool.prestart). True when one was started."""
    if not enabled(cfg):
        return False
    return _POOL.prestart(tuple(str(m) for m in (cfg.get("plugins") or [])))


def prestart_plugins(plugins) -> bool:
    """Pool.prestart with these plugins (a job process told by its sweep process, before it has a config)."""
    return _POOL.prestart(tuple(str(m) for m in plugins))


def driver_present() -> bool:
    """Whether a CUDA driver loads here (libcuda), without importing torch."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def drop_unused() -> None:
    """Stops a prestarted worker that no call has used (a job without isolation)."""
    worker = _POOL.worker
    if worker is not None and worker.key[1] is None and worker.method == "spawn":
        _POOL.retire()


def worker_plugins() -> tuple | None:
    """The plugins of the live worker (None when there is none)."""
    worker = _POOL.worker
    return worker.key[0] if worker is not None and worker.process.is_alive() else None


def worker_pid() -> int | None:
    """The live worker's process id (None when there is none): tests check reuse and replacement."""
    worker = _POOL.worker
    return worker.process.pid if worker is not None and worker.process.is_alive() else None


def shutdown() -> None:
    """Stops the worker (at exit, and in tests)."""
    _POOL.retire()


# ---- parent side ------------------------------------------------------------------------------------------

class WorkerStartError(RuntimeError):
    pass


class Worker:
    """One worker process, its pipe and its stderr file. `method`: "spawn" (a GPU's persistent worker: a fresh
    interpreter, since CUDA forbids fork after init) or "fork" (the CPU interpreter's worker for one point)."""

    def __init__(self, key: tuple, plugins: tuple, method: str = "spawn", first_call: tuple | None = None,
                 wait: bool = True, preload: tuple = ()):
        """first_call: (fn, args, kwargs) a forked worker runs at once, inherited rather than pickled (so a
        function a test defines or patches in place runs as it would in this process). wait=False: return once
        the process is started; `wait_ready` (the next `Pool.run`) waits for its imports. preload: modules the
        worker imports before it says it is ready (what unpickling the first call would import)."""
        self.key = key
        self.method = method
        self.ready = False
        ctx = multiprocessing.get_context(method)
        self.conn, child_conn = ctx.Pipe()
        fd, self.stderr_path = tempfile.mkstemp(prefix="flash-bwd-worker-", suffix=".stderr")
        os.close(fd)
        self.stderr_offset = 0
        self.process = ctx.Process(target=worker_main, name="flash-bwd-worker",
                                   args=(child_conn, plugins, self.stderr_path, os.getpid(), method, first_call,
                                         tuple(preload)))
        if method == "fork":  # else the child would write the parent's buffered output again when it exits
            sys.stdout.flush()
            sys.stderr.flush()
        with stdlib_start_method():
            self.process.start()
        child_conn.close()
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Waits for the worker's `ready` (its imports done); raises WorkerStartError (the worker stopped) when it
        failed or died at start, or said nothing in STARTUP_TIMEOUT_S."""
        if self.ready:
            return
        outcome, message = self.receive(STARTUP_TIMEOUT_S)
        if outcome != "message" or message[0] != "ready":
            if outcome == "message":
                why = message[1]
            else:
                why = self.death_reason(f"no answer in {STARTUP_TIMEOUT_S:g} s")
            self.stop(kill=True)
            raise WorkerStartError(why)
        self.ready = True

    def receive(self, timeout_s: float) -> tuple[str, object]:
        """("message", the worker's next message), ("died", None) or ("timeout", None) after timeout_s."""
        ready = wait([self.conn, self.process.sentinel], timeout_s)
        if not ready:
            return "timeout", None
        if self.conn.poll():  # a message first: the worker may have exited right after sending it
            try:
                return "message", self.conn.recv()
            except (EOFError, OSError):
                pass
        return "died", None

    def new_stderr(self) -> str:
        """What the worker wrote to stderr since the last call."""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(self.stderr_offset)
                data = f.read()
        except OSError:
            return ""
        self.stderr_offset += len(data)
        return data.decode(errors="replace")

    def forward_stderr(self) -> str:
        text = self.new_stderr()
        if text:
            sys.stderr.write(text)
            sys.stderr.flush()
        return text

    def death_reason(self, fallback: str) -> str:
        """'worker died (<signal or exit code>): <first error line of its stderr>'."""
        self.process.join(REAP_TIMEOUT_S)
        code = self.process.exitcode
        if code is None:
            how = fallback
        elif code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
        line = first_error_line(self.forward_stderr())
        return f"worker process died ({how})" + (f": {line}" if line else "")

    def stop(self, kill: bool = False) -> None:
        """Ends the worker: closing the pipe lets an idle worker return; a busy or stuck one is killed."""
        try:
            self.conn.close()
        except OSError:
            pass
        if (kill or not self.ready) and self.process.is_alive():  # not ready: still importing, nothing to finish
            self.process.kill()
        self.process.join(REAP_TIMEOUT_S if kill else 5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(REAP_TIMEOUT_S)
        if self.process.is_alive():
            print(f"isolate: worker {self.process.pid} did not exit after SIGKILL; left behind", file=sys.stderr)
        self.forward_stderr()
        try:
            os.unlink(self.stderr_path)
        except OSError:
            pass


class Pool:
    """At most one worker; replaced after a crash or a timeout, or for another (plugins, gpu_index)."""

    def __init__(self):
        self.worker: Worker | None = None

    def retire(self, kill: bool = False) -> None:
        if self.worker is not None:
            worker, self.worker = self.worker, None
            worker.stop(kill=kill)

    def prestart(self, plugins: tuple) -> bool:
        """Starts a spawned worker now, bound to no GPU yet, and returns without waiting for its imports (torch,
        Triton, the designs: PRELOAD), so they overlap what the caller does before its first point (its own
        imports, the lease, the row's key). The first `run` with these plugins adopts it for its GPU index; the
        worker touches no GPU before that call, which comes after the caller's lease. False (nothing started)
        where workers fork (the CPU interpreter: one per point) or a live worker is already there."""
        if start_method() != "spawn" or (self.worker is not None and self.worker.process.is_alive()):
            return False
        self.retire()
        try:
            self.worker = Worker((tuple(plugins), None), tuple(plugins), "spawn", wait=False, preload=PRELOAD)
        except Exception as exc:  # noqa: BLE001 - the first point starts one again and reports why
            print(f"isolate: worker prestart failed: {_one_line(exc)}", file=sys.stderr)
            return False
        from runners import phases
        phases.mark("prestart", worker=self.worker.process.pid)
        return True

    def run(self, fn, args: tuple, kwargs: dict, *, key: tuple, timeout_s: float, timer: str | None) -> dict:
        if self.worker is not None and self.worker.key == (key[0], None) and self.worker.method == "spawn":
            self.worker.key = key  # a prestarted worker: bound to this GPU by its first call
        if self.worker is not None and (self.worker.key != key or not self.worker.process.is_alive()):
            self.retire()
        method = start_method()
        if self.worker is None:
            try:
                first_call = (fn, args, kwargs) if method == "fork" else None
                self.worker = Worker(key, key[0], method, first_call, preload=PRELOAD if method == "spawn" else ())
            except Exception as exc:  # noqa: BLE001 - WorkerStartError, or spawn itself failing
                return fault_row("crashed", f"worker process did not start: {_one_line(exc)}", timer)
        worker = self.worker
        try:
            worker.wait_ready()  # a prestarted worker's imports (not part of point_timeout_s)
        except Exception as exc:  # noqa: BLE001 - WorkerStartError: it died or failed at start
            self.worker = None
            return fault_row("crashed", f"worker process did not start: {_one_line(exc)}", timer)
        try:
            if worker.method != "fork":  # a forked worker runs the call it was started with
                worker.conn.send((fn, args, kwargs))
        except (BrokenPipeError, EOFError, OSError):
            reason = worker.death_reason("pipe closed")
            self.retire(kill=True)
            return fault_row("crashed", reason, timer)
        outcome, message = worker.receive(timeout_s)
        if outcome == "timeout":  # no answer in time: a hang (or a point far slower than the limit)
            self.retire(kill=True)
            return fault_row("timeout", f"no result after {timeout_s:g} s (point_timeout_s); worker killed", timer)
        if outcome == "died":
            reason = worker.death_reason("died")
            self.retire(kill=True)
            return fault_row("crashed", reason, timer)
        worker.forward_stderr()
        kind, payload = message
        if kind == "raise":  # fn itself raised (a runner bug, not a point's failure): as in-process
            self.retire()
            raise RuntimeError(f"in the worker process: {payload}")
        if payload.get("status") == "crashed" or worker.method == "fork":
            self.retire()  # a dead CUDA context (the worker exits), or a forked worker: one per point
        return payload


_POOL = Pool()
atexit.register(_POOL.retire)
# A process that multiprocessing (or loky, hydra/launcher=local_gpus) started ends in multiprocessing's own exit
# function, not in atexit: it runs the finalizers, then joins every child, the worker too, which waits for a message
# forever. Retire the worker among those finalizers (on 4 H200s every local_gpus sweep hung at its end, 2026-11-26).
multiprocessing.util.Finalize(None, _POOL.retire, exitpriority=100)


@contextlib.contextmanager
def stdlib_start_method():
    """A spawned child sets multiprocessing's default start method to its parent's. Inside a loky process
    (Hydra's joblib launcher, hydra/launcher=local_gpus) that default is 'loky', which a fresh interpreter
    does not know ("ValueError: cannot find context for 'loky'", the child dies at start): for the start,
    make the default a standard one, then put it back."""
    current = multiprocessing.get_start_method(allow_none=True)
    if current is None or current in multiprocessing.get_all_start_methods():
        yield
        return
    multiprocessing.set_start_method("spawn", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(current, force=True)


def first_error_line(text: str) -> str:
    """The first line of a crash's stderr that looks like the error (Python's fatal error line, an
    exception, the C++ abort message), else its last non-empty line; '' when there is none."""
    lines = [" ".join(ln.split()) for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    for ln in lines:
        if any(mark in ln.lower() for mark in _ERROR_MARKS) and not ln.startswith(("File ", "Current thread")):
            return ln[:300]
    return lines[-1][:300] if lines else ""


# ---- worker side --------------------------------------------------------------------------------------------

def worker_main(conn, plugins: tuple, stderr_path: str, parent_pid: int, method: str = "spawn",
                first_call: tuple | None = None, preload: tuple = ()) -> None:
    """The worker process: imports the plugins and `preload`, then runs (fn, args, kwargs) messages until the pipe closes.
    After a result with status crashed (a dead CUDA context) it exits; the parent starts a fresh one."""
    if method == "fork":  # torch's OpenMP pool does not survive a fork: an op using it would hang forever
        import torch
        torch.set_num_threads(1)
    fd = os.open(stderr_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)  # everything written to fd 2 (Python, C++, the driver) lands in the file
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # a forked child may inherit a stream without a file
    import faulthandler
    faulthandler.enable(file=sys.stderr, all_threads=False)  # a segfault/abort: "Fatal Python error: ..." in the file
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    from runners import phases
    phases.mark("worker", method=method)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    try:
        env.use_interpreter_without_gpu()
        for name in (*plugins, *preload):
            importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as why the worker could not start
        conn.send(("failed", _one_line(exc)))
        return
    phases.mark("ready")
    conn.send(("ready", os.getpid()))
    pending = [first_call] if first_call is not None else []
    while True:
        try:
            message = pending.pop() if pending else conn.recv()
        except (EOFError, OSError):
            return
        fn, args, kwargs = message
        try:
            row = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - fn's own bug: the parent raises it, as without isolation
            conn.send(("raise", _one_line(exc)))
            continue
        fault = _cuda_fault()
        if fault is not None and row.get("status") != "crashed":
            row = {**row, "status": "crashed", "reason": f"CUDA context dead after the point: {fault}"}
        conn.send(("row", row))
        if row.get("status") == "crashed":
            sys.stderr.flush()
            os._exit(3)  # nothing of this CUDA context can be trusted: the parent starts a new worker


def _cuda_fault() -> str | None:
    """The sticky CUDA error this process has hit, if any (None on the CPU interpreter or a healthy GPU)."""
    if env.interpreting():
        return None
    import torch

    if not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a synchronize that fails after the point: the context is gone
        return _one_line(exc)
    return None


def _exit_with_parent(parent_pid: int) -> None:
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent_pid:
            os._exit(1)  # the parent is gone (killed): its lease is released, so stop using the GPU now


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text[:300]


__all__ = ["call", "enabled", "fault_row", "first_error_line", "prestart", "prestart_plugins", "shutdown", "worker_pid"]
