"""Bound launches (issue 44): a launch plan's warm kernel launches go straight to the compiled kernel's launcher.

    launch(fn, grid, *args, **kwargs)    # every launcher calls this instead of fn[grid](*args, **kwargs)

Outside a plan's phase this is `fn[grid](*args, **kwargs)`: Triton's own path (binding the arguments to the kernel's
parameters, specializing each one, the cache-key lookup, then the compiled kernel's launcher). Inside one
(`LaunchSites.phase()`, which `variants.op._EagerAttention` enters for its forward and its backward), the phase's first
run goes through that same path and keeps, per launch, in call order, the `CompiledKernel` Triton returned. Later
runs of the phase call each kernel's launcher directly with the arguments in the kernel's parameter order, the grid and
the current stream: what `JITFunction.run` does after its cache hit, without the binding, the specialization and the
cache-key computation.

This is sound because everything Triton specializes on is fixed by the phase's key. A plan's signature fixes the
shapes, strides, dtypes, flags and blocks, so every integer argument, every constexpr and every launch in the
sequence; the signature also holds whether q, k, v (and the gate) are 16-byte aligned, and the backward's sites are
keyed by dO's strides, dtype and alignment, so pointer alignment (the other thing Triton specializes on) is fixed too.
What changes per call is data pointers, TMA descriptors built from the call's tensors, and the scale (an fp32
argument that is never specialized).

The choice between the bound path and Triton's path is made once per phase's sites, on its first run: `bind` refuses
a kernel that is not a `CompiledKernel` with a launcher (the interpreter, a Triton whose API differs) or that has
pre-run hooks, and then the sites stay on Triton's path (`mode == "jit"`, `reason` says why). A later run never
switches silently. With `VERIFY = True` (the CPU tests) each bound launch also checks that its kernel and its
constexpr values are the ones it was bound with.

Triton 3.6 and 3.9 launch the same way: `kernel.run(grid_x, grid_y, grid_z, stream, kernel.function,
kernel.packed_metadata, launch_metadata, enter_hook, exit_hook, *every parameter in order)`; the launcher skips the
constexpr positions and flattens tuples. Gluon kernels are JIT functions of the same kind.
"""
import functools
import inspect
import os
import threading

# On by default since tests/test_launch_gpu.py passed on an H200 (every design, gradients as the operator path's).
# FLASH_BWD_BOUND_LAUNCHES=0 turns them off (every launch then goes through Triton's path). The interpreter and CPU
# tensors never bind whatever this says (variants.plan.build: Plan.unbound_reason).
ENABLED = os.environ.get("FLASH_BWD_BOUND_LAUNCHES", "1") != "0"
VERIFY = False  # tests: each bound launch checks its kernel and its constexprs against the bound ones
_MISSING = object()


class LaunchStats:
    """Counters over every plan: `bound` launches made through a bound kernel, `jit` launches of a phase's first run
    (through Triton's path), `binds` kernels bound."""

    def __init__(self):
        self.bound = self.jit = self.binds = 0

    def reset(self) -> None:
        self.bound = self.jit = self.binds = 0


stats = LaunchStats()


def _hooks_on(hook) -> bool:
    """A launch hook that would run: not None and, for 3.6's HookChain, not empty."""
    return hook is not None and bool(getattr(hook, "calls", True))


class BoundLaunch:
    """One launch of a phase: the compiled kernel, the kernel's parameters (name, default) in order, and the values its
    constexprs had when it was bound (for VERIFY)."""

    def __init__(self, fn, kernel, params: tuple, constexprs: tuple, device: int, get_stream, knobs):
        self.fn, self.kernel, self.params, self.constexprs = fn, kernel, params, constexprs
        self.device, self.get_stream, self.knobs = device, get_stream, knobs
        self.run, self.function, self.metadata = kernel.run, kernel.function, kernel.packed_metadata
        self.tails = tuple(parameter_tail(params, n) for n in range(len(params) + 1))  # by positional count

    def __call__(self, fn, grid, args: tuple, kwargs: dict):
        values = bind_values(self.tails[len(args)], args, kwargs)  # bound_arguments' binding, its lookups made once
        if VERIFY:
            self.verify(fn, values)
        stream = self.get_stream(self.device)
        runtime = self.knobs.runtime
        enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
        # a profiler listens (what Triton's path would give it); no hook set, the common case: no call made
        if (enter is not None or leave is not None) and (_hooks_on(enter) or _hooks_on(leave)):
            metadata = self.kernel.launch_metadata(grid, stream, *values)
        else:
            metadata = enter = leave = None
        if len(grid) == 2:
            self.run(grid[0], grid[1], 1, stream, self.function, self.metadata, metadata, enter, leave, *values)
        else:
            self.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream, self.function,
                     self.metadata, metadata, enter, leave, *values)
        stats.bound += 1
        return self.kernel

    def verify(self, fn, values: list) -> None:
        if fn is not self.fn:
            raise RuntimeError(f"bound launch mismatch: {getattr(fn, '__name__', fn)} where "
                               f"{getattr(self.fn, '__name__', self.fn)} was bound")
        got = constexpr_values(self.fn, values)
        if got != self.constexprs:
            raise RuntimeError(f"bound launch of {getattr(fn, '__name__', fn)}: constexprs {got} differ from the bound "
                               f"{self.constexprs}")


def bound_arguments(params: tuple, args: tuple, kwargs: dict) -> list:
    """Every parameter's value in the kernel's order (constexprs included: the launcher skips them), as Triton's
    binder binds them (its `bound_args.values()`): the positional ones first, then by name, else the default."""
    return bind_values(parameter_tail(params, len(args)), args, kwargs)


def parameter_tail(params: tuple, positional: int) -> tuple:
    """(names, defaults) of the parameters after the first `positional`: what `bind_values` looks up by name."""
    rest = params[positional:]
    return tuple(name for name, _ in rest), tuple(default for _, default in rest)


def bind_values(tail: tuple, args: tuple, kwargs: dict) -> list:
    """args, then kwargs.get(name, default) for each (name, default) of tail (`parameter_tail` for len(args)): the
    one binding of `bound_arguments` and of a bound launch (the map runs the lookups in C)."""
    names, defaults = tail
    return [*args, *map(kwargs.get, names, defaults)]


@functools.cache
def driver_api():
    """(get_current_device, get_current_stream, knobs) of the active Triton driver, as JITFunction.run uses them;
    raises without a GPU driver (tests replace it). Looked up once (two imports and the driver's attributes cost
    microseconds, and current_device() asks twice per eager call); an exception is not cached."""
    from triton import knobs
    from triton.runtime.driver import driver
    return driver.active.get_current_device, driver.active.get_current_stream, knobs


def current_device() -> int:
    """The device Triton launches on (a phase's key: a bound kernel is loaded on one device)."""
    return driver_api()[0]()


def parameters(fn) -> tuple:
    """(name, default or _MISSING) of each of a JIT function's parameters, in order."""
    return tuple((name, _MISSING if p.default is inspect.Parameter.empty else p.default)
                 for name, p in fn.signature.parameters.items())


def constexpr_values(fn, values: list) -> tuple:
    return tuple(value for param, value in zip(fn.params, values) if param.is_constexpr)


def bind(fn, kernel, args: tuple, kwargs: dict):
    """(BoundLaunch, None), or (None, the reason) when this launch cannot be bound (then the sites stay on Triton's
    path)."""
    if not ENABLED:
        return None, "bound launches are off (FLASH_BWD_BOUND_LAUNCHES=0)"
    if kernel is not None and hasattr(kernel, "result"):  # 3.6's asynchronous compile hands back a future
        kernel = kernel.result()
    missing = [name for name in ("run", "function", "packed_metadata", "launch_metadata") if not hasattr(kernel, name)]
    if missing or not hasattr(fn, "signature") or not hasattr(fn, "params"):
        return None, f"{type(kernel).__name__} from {type(fn).__name__} has no launcher API ({', '.join(missing)})"
    if getattr(fn, "pre_run_hooks", None):
        return None, f"{fn.__name__} has pre-run hooks"
    try:
        get_device, get_stream, knobs = driver_api()
    except (ImportError, AttributeError, RuntimeError) as exc:
        return None, f"no Triton driver API ({type(exc).__name__}: {exc})"
    params = parameters(fn)
    values = bound_arguments(params, args, kwargs)
    if any(value is _MISSING for value in values):
        return None, f"{fn.__name__}: an argument without a value"
    bound = BoundLaunch(fn, kernel, params, constexpr_values(fn, values), get_device(), get_stream, knobs)
    stats.binds += 1
    return bound, None


class LaunchSites:
    """The launches of one phase (a plan's forward, or its backward for one dO layout), in call order.
    mode: None before the first run, then "bound" or "jit" for good (reason: why jit). memos: what the phase's
    launchers worked out from the phase's key alone (`memo`), by (request number, owner)."""

    def __init__(self, bindable: bool = True, reason: str | None = None):
        self.mode = None if bindable else "jit"
        self.reason = reason
        self.launches: list[BoundLaunch] = []
        self.memos: dict = {}

    def phase(self):
        """A context manager that runs the phase's launches through this object (see the module's doc); a plain
        object, not a generator, since it is entered twice per eager call."""
        return _NO_PHASE if self.mode == "jit" else _PhaseRun(self)


class _NoPhase:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NO_PHASE = _NoPhase()


class _PhaseRun:
    def __init__(self, sites: LaunchSites):
        self.sites, self.index, self.recorded, self.reasons, self.previous = sites, 0, [], [], None
        self.requests = 0  # memo() requests so far in this run

    def __enter__(self):
        self.previous, _active.run = _active.run, self
        return self

    def __exit__(self, kind, value, traceback):
        _active.run = self.previous
        if kind is None:  # a run that raised records nothing
            self.finish()
        return False

    def launch(self, fn, grid, args, kwargs):
        sites, index = self.sites, self.index
        self.index = index + 1
        if sites.mode == "bound":
            if index >= len(sites.launches):
                raise RuntimeError(f"bound launch mismatch: launch {index + 1} of a phase that had "
                                   f"{len(sites.launches)}")
            return sites.launches[index](fn, grid, args, kwargs)
        kernel = fn[grid](*args, **kwargs)
        stats.jit += 1
        bound, reason = (None, "a grid given as a function") if callable(grid) else bind(fn, kernel, args, kwargs)
        self.recorded.append(bound)
        if reason:
            self.reasons.append(reason)
        return kernel

    def finish(self) -> None:
        sites = self.sites
        if sites.mode == "bound":
            if self.index != len(sites.launches):
                raise RuntimeError(f"bound launch mismatch: {self.index} launches in a phase that had "
                                   f"{len(sites.launches)}")
            return
        if self.reasons:  # one launch cannot be bound: the whole phase stays on Triton's path
            sites.mode, sites.reason = "jit", self.reasons[0]
        else:
            sites.mode, sites.launches = "bound", self.recorded


class _Active(threading.local):
    run: _PhaseRun | None = None


_active = _Active()


def launch(fn, grid, *args, **kwargs):
    """fn[grid](*args, **kwargs), or its bound launch inside a plan's phase (see the module's doc)."""
    run = _active.run
    if run is None:
        return fn[grid](*args, **kwargs)
    return run.launch(fn, grid, args, kwargs)


def memo(owner: str) -> dict | None:
    """A launcher's memo inside a plan's phase, else None (issue 44: host time per call). Inside a phase everything
    but the data (pointers, TMA descriptors' bases, the scale) is fixed by the phase's key (the module's doc: shapes,
    strides, dtypes, flags, blocks, device), and a phase's launchers run in the same order every time, so the n-th
    request of a phase's run names the same launcher call on every run: its memo (a dict, empty on the phase's first
    run) may keep what the launcher derives from the key alone (grids, constexpr records, strides, descriptor
    templates, argument dicts) and never the call's tensors or the scale. owner: the launcher's name (a launcher that
    returned early without a request cannot hand its memo to another). Outside a phase (the operator's path,
    binding off, the interpreter, CPU tensors) it is None and launchers work everything out per call."""
    run = _active.run
    if run is None:
        return None
    key = (run.requests, owner)
    run.requests += 1
    memos = run.sites.memos
    slot = memos.get(key)
    if slot is None:
        slot = memos[key] = {}
    return slot
