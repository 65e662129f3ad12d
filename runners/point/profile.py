"""Why a point is as fast as it is: the GPU time of every kernel one backward launches, and the compiled
resources (registers, spills, shared memory, warps, stages, occupancy) of every Triton kernel among them.

`explain(fn, ...)` runs after the timing, in a separate run of a few calls under the PyTorch profiler (never
inside the timed region), and returns the row's explanation columns. It never raises: without a GPU, without
the profiler, or when the profiled run fails, the columns stay empty and `profile_note` says why.

How the compiled kernels are found (Triton 3.6 and 3.9 alike): `JITFunction.run` returns the `CompiledKernel` it
launched (`kernel[grid](...)` goes through it), so during the profiled calls `capture_compiled()` wraps that
method and records each launched kernel with its grid. A `CompiledKernel` carries `n_regs` and `n_spills` (set
when its binary is loaded, i.e. at its first launch), `metadata.shared` (bytes of shared memory),
`metadata.num_warps` and `metadata.num_stages`. Kernels launched without `JITFunction.run` (Inductor's, in
`flex`) are timed in `kernel_ms` but get no resources; CUDA baselines have no Triton kernel.
"""
import contextlib
import json
import math
import re

from runners.compile.arch_limits import ARCHS

PROFILE_CALLS = 3  # backward calls under the profiler; kernel_ms is their mean per call
MAX_PROGRAMS_PER_SM = ARCHS["sm90"].max_programs_per_sm  # resident blocks per SM; torch does not expose it
SMEM_RESERVED_PER_PROGRAM = 1024  # bytes the CUDA runtime reserves per resident block (sm_80 and later)
REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256 (8 per thread)
HOPPER_LIMITS = {**ARCHS["sm90"].occupancy_limits(), "sm_count": 132}  # H100 SXM (runners/compile/arch_limits.py)

EMPTY = {"kernel_ms": None, "kernel_ms_sum": math.nan, "kernel_launches": math.nan, "top_kernel": None,
         "top_kernel_share": math.nan, "resources_json": None, "top_triton_kernel": None, "n_regs": math.nan,
         "n_spills": math.nan, "smem_bytes": math.nan, "compiled_num_warps": math.nan,
         "compiled_num_stages": math.nan, "programs_per_sm": math.nan, "occupancy_limiter": None,
         "profile_note": None}

GENERIC_KERNELS = ("elementwise_kernel", "vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "reduce_kernel")


def explain(fn, *, on_gpu: bool, device: str = "cuda", calls: int = PROFILE_CALLS) -> dict:
    """The explanation columns of one point (EMPTY's keys) from `calls` profiled calls of `fn`."""
    if not on_gpu:
        return {**EMPTY, "profile_note": "CPU interpreter: no CUDA kernels, no compiled-kernel metadata"}
    notes = []
    try:
        with capture_compiled() as launched:
            kernel_ms, launches = kernel_breakdown(fn, calls, device)
    except Exception as exc:  # noqa: BLE001 - the explanation is optional; the measurement stands
        return {**EMPTY, "profile_note": f"profiled run failed: {exception_line(exc)}"}
    row = dict(EMPTY)
    if kernel_ms:
        total = sum(kernel_ms.values())
        top = max(kernel_ms, key=kernel_ms.get)
        row.update(kernel_ms=json.dumps(kernel_ms), kernel_ms_sum=total, kernel_launches=launches / calls,
                   top_kernel=top, top_kernel_share=kernel_ms[top] / total if total > 0 else math.nan)
    else:
        notes.append("the profiler recorded no CUDA kernel (CUPTI unavailable?)")
    try:
        resources = compiled_resources(launched, device_limits(device))
    except Exception as exc:  # noqa: BLE001
        resources = {}
        notes.append(f"compiled metadata unreadable: {exception_line(exc)}")
    if resources:
        row["resources_json"] = json.dumps(resources, sort_keys=True)
        heavy = max(resources, key=lambda name: (kernel_ms or {}).get(name, -1.0))
        r = resources[heavy]
        row.update(top_triton_kernel=heavy, n_regs=r["n_regs"], n_spills=r["n_spills"], smem_bytes=r["smem_bytes"],
                   compiled_num_warps=r["num_warps"], compiled_num_stages=r["num_stages"],
                   programs_per_sm=r["programs_per_sm"], occupancy_limiter=r["limiter"])
    elif not notes:
        notes.append("no @triton.jit kernel launched (baseline)")
    row["profile_note"] = "; ".join(notes) or None
    return row


# ------------------------------------------------------------------------------------------ kernel times
def kernel_breakdown(fn, calls: int, device: str = "cuda") -> tuple[dict, int]:
    """({short kernel name: ms per call}, kernel launches in all calls) of `calls` calls of `fn` under the
    PyTorch profiler (CUDA activity). Memsets and copies count as kernels: they are part of the backward."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    # acc_events: one cycle either way; without it torch 2.11 warns on every point that events are cleared per cycle
    with profile(activities=[ProfilerActivity.CUDA], acc_events=True) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize(device)
    return kernel_ms_from_events(prof.events(), calls)


def kernel_ms_from_events(events, calls: int) -> tuple[dict, int]:
    """Sum the device events of a profile by short kernel name -> ({name: ms per call}, launches), largest first.
    GPU-side user annotations (record_function ranges drawn on the GPU timeline) are not kernels: skipped."""
    totals, launches = {}, 0
    for event in events:
        if str(getattr(event, "device_type", "")).rsplit(".", 1)[-1] != "CUDA":
            continue
        if getattr(event, "is_user_annotation", False):
            continue
        name = short_kernel_name(event.name)
        totals[name] = totals.get(name, 0.0) + event.time_range.elapsed_us() / 1e3 / calls
        launches += 1
    return dict(sorted(totals.items(), key=lambda item: -item[1])), launches


def short_kernel_name(name: str) -> str:
    """A readable kernel name: C++ return type, namespaces, template arguments and parameter lists dropped
    ('void flash::flash_bwd_dot_do_o_kernel<true, Traits>(Params)' -> 'flash_bwd_dot_do_o_kernel'); PyTorch's
    generic elementwise / reduce kernels keep their functor ('vectorized_elementwise_kernel[FillFunctor]')."""
    text = re.sub(r"^void\s+", "", name.strip())
    head = re.split(r"[<(]", text, maxsplit=1)[0].strip()
    base = head.rsplit("::", 1)[-1] or head or name
    if base in GENERIC_KERNELS:
        functor = re.search(r"(\w*Functor\w*|\w+_kernel_cuda\w*)", text[len(head):])
        if functor:
            base += f"[{functor.group(1)}]"
    return base


# -------------------------------------------------------------------------------------- compiled resources
@contextlib.contextmanager
def capture_compiled():
    """Yields a list that collects (CompiledKernel, grid) of every `JITFunction.run` launch while inside."""
    from triton.runtime.jit import JITFunction

    launched = []
    original = JITFunction.run

    def run(self, *args, **kwargs):
        kernel = original(self, *args, **kwargs)
        if kernel is not None and not kwargs.get("warmup", False):
            launched.append((kernel, kwargs.get("grid")))
        return kernel

    JITFunction.run = run
    try:
        yield launched
    finally:
        JITFunction.run = original


def device_limits(device: str = "cuda") -> dict:
    """Per-SM limits from torch.cuda.get_device_properties (Hopper's numbers where an attribute is missing)."""
    import torch

    props = torch.cuda.get_device_properties(device)
    warp = getattr(props, "warp_size", 32) or 32
    return {"regs_per_sm": getattr(props, "regs_per_multiprocessor", None) or HOPPER_LIMITS["regs_per_sm"],
            "smem_per_sm": getattr(props, "shared_memory_per_multiprocessor", None) or HOPPER_LIMITS["smem_per_sm"],
            "max_warps_per_sm": (getattr(props, "max_threads_per_multi_processor", None) or 2048) // warp,
            "sm_count": props.multi_processor_count, "warp_size": warp}


def compiled_resources(launched, limits: dict) -> dict:
    """{kernel name: resources} of the captured launches (one entry per compiled kernel; the same kernel
    compiled twice with different constants in one backward gets 'name#2')."""
    out, seen = {}, {}
    for kernel, grid in launched:
        ident = id(kernel)
        if ident in seen:
            continue
        name = getattr(kernel, "name", None) or kernel.metadata.name
        key = name if name not in out else f"{name}#{sum(1 for k in out if k.split('#')[0] == name) + 1}"
        seen[ident] = key
        out[key] = kernel_resources(kernel, grid, limits)
    return out


def kernel_resources(kernel, grid, limits: dict) -> dict:
    meta = kernel.metadata
    n_regs, n_spills = getattr(kernel, "n_regs", None), getattr(kernel, "n_spills", None)
    shared, warps, stages = int(meta.shared), int(meta.num_warps), int(meta.num_stages)
    programs, limiter = programs_per_sm(n_regs, shared, warps, limits)
    grid_programs = math.prod(int(g) for g in grid) if isinstance(grid, (tuple, list)) and grid else None
    waves = None
    if grid_programs and programs:
        waves = round(grid_programs / (programs * limits["sm_count"]), 2)
    return {"n_regs": n_regs, "n_spills": n_spills, "smem_bytes": shared, "num_warps": warps, "num_stages": stages,
            "programs_per_sm": programs, "limiter": limiter, "grid_programs": grid_programs, "waves": waves}


def programs_per_sm(n_regs, shared: int, num_warps: int, limits: dict, warp_size: int = 32) -> tuple:
    """(resident programs per SM, what limits it: 'regs', 'smem', 'warps' or 'blocks'), the occupancy
    calculator's rule without its per-scheduler granularity: registers per warp rounded up to 256, 1 KB of
    shared memory reserved per program, at most `limits["max_programs_per_sm"]` (MAX_PROGRAMS_PER_SM where absent).
    (None, None) when n_regs is unknown."""
    if n_regs is None or num_warps < 1:
        return None, None
    regs_per_warp = math.ceil(max(int(n_regs), 1) * warp_size / REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    bounds = {"regs": limits["regs_per_sm"] // (regs_per_warp * num_warps),
              "smem": limits["smem_per_sm"] // (shared + SMEM_RESERVED_PER_PROGRAM) if shared else 1 << 30,
              "warps": limits["max_warps_per_sm"] // num_warps,
              "blocks": limits.get("max_programs_per_sm", MAX_PROGRAMS_PER_SM)}
    limiter = min(bounds, key=bounds.get)  # first of the tied: regs, smem, warps, blocks
    return int(bounds[limiter]), limiter


def exception_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
