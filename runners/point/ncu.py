"""Distance to the limit: each kernel's tensor-pipe utilization and DRAM throughput as a % of peak, read with Nsight
Compute (`ncu`) behind `bench.ncu=true` (off by default: ncu replays every kernel, which takes far longer than the
timing).

`explain(point, ...)` runs after the timing and the profile, for an ok point on a GPU: it runs the same point's
backward in a child process (`python -m runners.point.ncu_child <spec JSON>`) under

    ncu --csv --page raw --print-units base --metrics <METRICS> --nvtx --nvtx-include ncu_backward/

The child makes the point's inputs, runs the backward WARMUP_CALLS times (compilation, caches) and then once inside
the NVTX push/pop range `ncu_backward`: ncu profiles every kernel of that one steady call and nothing else. Its CSV
is parsed into per-kernel values keyed by `profile.short_kernel_name` (the names of `kernel_ms`); launches with the
same short name are combined, weighted by their duration. It never raises: without ncu, on the CPU interpreter, for
a failed point, or when ncu fails or times out, the columns stay empty and `ncu_note` says why.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys

from runners.point import env
from runners.point.profile import short_kernel_name

NVTX_RANGE = "ncu_backward"  # the child's push/pop range around the one profiled backward call
WARMUP_CALLS = 2  # backward calls before the profiled one (compilation, autotuning, allocator warm)
TENSOR_HMMA = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"  # mma.sync (sm80+)
TENSOR_GMMA = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"  # wgmma (sm90 only)
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
DURATION = "gpu__time_duration.sum"
TIME_UNITS_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
                 "second": 1e3, "s": 1e3}  # ncu's unit row -> factor to ms

EMPTY = {"ncu_tensor_pct": None, "ncu_dram_pct": None, "ncu_kernel_ms": None, "top_kernel_tensor_pct": math.nan,
         "top_kernel_dram_pct": math.nan, "ncu_note": None}


def enabled(bench) -> bool:
    return bool(getattr(bench, "ncu", False))


def not_run(bench, *, on_gpu: bool, why: str = "point not ok: not profiled") -> dict:
    """EMPTY with the note of a point ncu did not (yet) profile: bench.ncu off, the CPU interpreter, or `why`."""
    if not enabled(bench):
        note = "bench.ncu=false (off by default: ncu replays every kernel)"
    elif not on_gpu:
        note = "CPU interpreter: no CUDA kernels to profile"
    else:
        note = why
    return {**EMPTY, "ncu_note": note}


def metrics(capability: tuple | None) -> list[str]:
    """The metrics for a compute capability (major, minor): wgmma's tensor pipe exists only on sm90, and ncu refuses
    the whole run when one metric is unknown to the GPU."""
    tensor = [TENSOR_HMMA, TENSOR_GMMA] if capability and capability[0] == 9 else [TENSOR_HMMA]
    return [*tensor, DRAM, DURATION]


def command(spec: dict, *, ncu: str, capability: tuple | None) -> list[str]:
    """ncu's argv profiling the child's one backward call of `spec` (runners/point/ncu_child.py)."""
    return [ncu, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(metrics(capability)),
            "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", sys.executable, "-m", "runners.point.ncu_child",
            json.dumps(spec, sort_keys=True)]


def child_spec(point, *, gpu_index: int, seed: int, plugins=()) -> dict:
    """What the child needs to rebuild the point (JSON): the problem, the resolved blocks, seed, device, plugins."""
    return {"variant": point.variant, "batch": point.batch, "seq": point.seq, "seq_k": point.seq_k,
            "heads": point.heads, "kv_heads": point.kv_heads, "head_dim": point.head_dim, "causal": point.causal,
            "dtype": point.dtype, "layout": point.layout, "blocks": point.blocks_dict,
            "doc_lens": None if point.doc_lens is None else list(point.doc_lens),
            "window_left": point.window_left, "window_right": point.window_right, "softcap": point.softcap,
            "gate": point.gate,
            "gpu_index": int(gpu_index), "seed": int(seed), "warmup_calls": WARMUP_CALLS, "plugins": list(plugins)}


def explain(point, bench, *, on_gpu: bool, gpu_index: int = 0, seed: int = 0, top_kernel: str | None = None,
            plugins=(), capability: tuple | None = None) -> dict:
    """The ncu columns (EMPTY's keys) of an ok point. Never raises."""
    if not enabled(bench) or not on_gpu:
        return not_run(bench, on_gpu=on_gpu)
    ncu = shutil.which("ncu")
    if ncu is None:
        return {**EMPTY, "ncu_note": "ncu not on PATH"}
    timeout = float(getattr(bench, "ncu_timeout_s", 120.0))
    try:
        argv = command(child_spec(point, gpu_index=gpu_index, seed=seed, plugins=plugins), ncu=ncu,
                       capability=capability)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=str(env.REPO),
                              env={**os.environ, "PYTHONPATH": _pythonpath()})
    except subprocess.TimeoutExpired:
        return {**EMPTY, "ncu_note": f"ncu failed: no result within bench.ncu_timeout_s={timeout:g} s"}
    except Exception as exc:  # noqa: BLE001 - the ncu columns are optional; the measurement stands
        return {**EMPTY, "ncu_note": f"ncu failed: {_line(f'{type(exc).__name__}: {exc}')}"}
    return columns(done.stdout, returncode=done.returncode, stderr=done.stderr, top_kernel=top_kernel)


def columns(stdout: str, *, returncode: int = 0, stderr: str = "", top_kernel: str | None = None) -> dict:
    """EMPTY's keys from ncu's output: per-kernel JSON dicts, the top kernel's values, or a note saying why not."""
    try:
        kernels = parse_csv(stdout)
    except ValueError as exc:
        kernels, problem = {}, str(exc)
    else:
        problem = "ncu profiled no kernel (NVTX range not seen?)"
    if not kernels:
        error = _error_line(stdout + "\n" + stderr)
        why = error or (f"exit status {returncode}" if returncode else problem)
        return {**EMPTY, "ncu_note": f"ncu failed: {_line(why)}"}
    ms = {k: v["ms"] for k, v in kernels.items()}
    top = top_kernel if top_kernel in kernels else max(ms, key=ms.get)
    row = {**EMPTY, "ncu_kernel_ms": json.dumps(ms),
           "ncu_tensor_pct": json.dumps({k: v["tensor_pct"] for k, v in kernels.items()}),
           "ncu_dram_pct": json.dumps({k: v["dram_pct"] for k, v in kernels.items()})}
    row["top_kernel_tensor_pct"] = _nan(kernels[top]["tensor_pct"])
    row["top_kernel_dram_pct"] = _nan(kernels[top]["dram_pct"])
    if returncode:  # the CSV is there but something failed after it: keep the values, say so
        row["ncu_note"] = f"ncu exit status {returncode}: {_line(_error_line(stderr) or 'see stderr')}"
    return row


# ------------------------------------------------------------------------------------------------ parsing
def parse_csv(text: str) -> dict:
    """{short kernel name: {"ms", "tensor_pct", "dram_pct", "launches"}} from `ncu --csv --page raw` output, largest
    ms first. The output holds ncu's `==PROF==` lines and the child's own output before the CSV; the CSV is a header
    row (starting "ID", then "Kernel Name" ..., then one column per metric), a units row, one row per profiled
    launch. Numbers may carry thousands separators. tensor_pct is the busier of the tensor pipes read (mma.sync's
    hmma pipe, wgmma's gmma pipe); launches of one short name are averaged weighted by their duration. A value ncu
    did not report is None. ValueError when a header is there but a metric column or the kernel name is missing."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return {}
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = table[0], table[1:]
    if "Kernel Name" not in header or DURATION not in header:
        raise ValueError(f"ncu CSV without 'Kernel Name' or {DURATION} columns: {', '.join(header[:14])}")
    units = {}
    if body and not body[0][header.index("ID")].strip():  # the units row: ID is blank there
        units = dict(zip(header, body[0]))
        body = body[1:]
    to_ms = TIME_UNITS_MS.get(units.get(DURATION, "nsecond").strip() or "nsecond", 1e-6)
    sums = {}  # name -> [ms, tensor·ms, ms of tensor values, dram·ms, ms of dram values, launches]
    for cells in body:
        rec = dict(zip(header, cells))
        name = short_kernel_name(rec.get("Kernel Name", ""))
        ms = _number(rec.get(DURATION))
        if not name or ms is None:
            continue
        ms *= to_ms
        tensor = [v for v in (_number(rec.get(m)) for m in (TENSOR_HMMA, TENSOR_GMMA)) if v is not None]
        dram = _number(rec.get(DRAM))
        s = sums.setdefault(name, [0.0, 0.0, 0.0, 0.0, 0.0, 0])
        s[0] += ms
        if tensor:
            s[1] += max(tensor) * ms
            s[2] += ms
        if dram is not None:
            s[3] += dram * ms
            s[4] += ms
        s[5] += 1
    out = {name: {"ms": s[0], "tensor_pct": _mean(s[1], s[2]), "dram_pct": _mean(s[3], s[4]), "launches": s[5]}
           for name, s in sums.items()}
    return dict(sorted(out.items(), key=lambda item: -item[1]["ms"]))


def _mean(total: float, weight: float):
    return round(total / weight, 3) if weight > 0 else None


def _number(text) -> float | None:
    if text is None:
        return None
    text = str(text).strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _nan(value) -> float:
    return math.nan if value is None else float(value)


def _error_line(text: str) -> str:
    """ncu's first `==ERROR==` line (e.g. ERR_NVGPUCTRPERM: no permission for the GPU's counters), else the last
    line of a Python traceback in the child's output; '' when neither."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("==ERROR=="):
            return ln[len("==ERROR=="):].strip()
    errors = [ln for ln in lines if "Error" in ln.split(":", 1)[0] and not ln.startswith("==")]
    return errors[-1] if errors else ""


def _line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pythonpath() -> str:
    """The child imports this checkout's `runners` and `variants` first (cwd is the repo root too)."""
    rest = os.environ.get("PYTHONPATH", "")
    return str(env.REPO) + (os.pathsep + rest if rest else "")
