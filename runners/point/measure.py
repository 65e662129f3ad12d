"""One point: inputs, the accuracy gate, memory, timing and FLOPs -> the measurement columns of a row.

Order: build inputs; `variant.prepare` runs the forward once and returns the backward closure `fn`
(the point's `timed` = forward / train: runners/point/timed.py's closure of the forward, or of forward + backward);
one `fn()` call gives the peak memory and the gradients (O, the LSE) checked against variants.reference (accuracy
BEFORE timing); then `fn` alone is timed. Nothing is allocated inside the timed region but what the
backward itself allocates. A failure at any stage becomes a status and a one-line reason, never an exception.
"""
import functools
import gc
import math
import time

from runners.point import env, ncu, profile

env.use_interpreter_without_gpu()  # before `import variants`: @triton.jit reads TRITON_INTERPRET at import

import torch  # noqa: E402
import triton  # noqa: E402

import variants  # noqa: E402
from variants.accuracy import REL_TOL, error  # noqa: E402
from variants.base import default_scale  # noqa: E402
from variants.problem import DTYPES, NO_MODIFIERS  # noqa: E402
from variants.reference import reference_grads  # noqa: E402
from runners.point import timed as timed_kinds, varlen_inputs  # noqa: E402
from runners.point import accuracy_scope  # noqa: E402
from runners.point.reference_rows import reference_dsink  # noqa: E402
from runners.point.accuracy_scope import (chunk_rows, reference_scope, scope_slice, sliced_gate,  # noqa: E402
                                          sliced_sink)

QUANTILES = [0.5, 0.2, 0.8]  # -> ms, ms_p20, ms_p80

STATUSES = ("ok", "wrong", "oom", "compile_error", "resources", "unsupported", "error", "crashed", "timeout",
            "skipped")  # skipped: not run, e.g. over cpu_budget_s in the CPU interpreter (runners/point/cpu_cost.py)
FAULT_STATUSES = ("crashed", "timeout")  # the point took its process down or never finished (runners/isolation/isolate.py)
# Sticky CUDA errors: the context is dead after one, every later CUDA call in the process fails.
FATAL_CUDA_ERRORS = ("illegal memory access", "illegal address", "unspecified launch failure", "device-side assert",
                     "misaligned address", "illegal instruction", "hardware stack error", "uncorrectable ecc",
                     "an invalid program counter", "cuda error: launch failure")


def _error_class(module: str, name: str):
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except (ImportError, AttributeError):
        return None


_OUT_OF_RESOURCES = tuple(c for c in (_error_class("triton.runtime.errors", "OutOfResources"),
                                      _error_class("triton.runtime.autotuner", "OutOfResources")) if c)
_COMPILE_ERRORS = tuple(c for c in (_error_class("triton.compiler.errors", "CompilationError"),
                                    _error_class("triton.runtime.errors", "PTXASError")) if c)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails
        return ""


def one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(_text(exc).split())  # Triton messages span lines; keep one
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_fatal_cuda_error(text: str) -> bool:
    """True for a sticky CUDA error (illegal address, launch failure, device assert ...): the process's CUDA
    context cannot run anything after it."""
    low = text.lower()
    return any(p in low for p in FATAL_CUDA_ERRORS)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """'<Type>: <first line of the message>' (a CUDA error's advice lines dropped)."""
    lines = [ln.strip() for ln in _text(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify(exc: BaseException, from_variant: bool) -> str:
    """Status for an exception: resources, compile_error, crashed (a sticky CUDA error: the context is
    dead), oom, unsupported (ValueError raised by the variant: its way of refusing a problem or config),
    or error."""
    if _OUT_OF_RESOURCES and isinstance(exc, _OUT_OF_RESOURCES):
        return "resources"
    if _COMPILE_ERRORS and isinstance(exc, _COMPILE_ERRORS):
        return "compile_error"
    if is_fatal_cuda_error(_text(exc)):
        return "crashed"
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in _text(exc).lower():
        return "oom"
    if from_variant and isinstance(exc, ValueError):
        return "unsupported"
    return "error"


def timer_name(bench, interpreting: bool) -> str:
    """How `fn` is timed; part of config_key (timings from different timers are different measurements)."""
    if interpreting:
        return "wall_clock"
    if bench.cuda_graph:
        return "do_bench_cudagraph"
    return "do_bench" if bench.flush_l2 else "cuda_events"


def make_inputs(point, device: str, seed: int):
    """q [B, Nq, H, D], k [B, Nk, Hkv, D], v [B, Nk, Hkv, Dv], do [B, Nq, H, Dv] (Dv = D unless the point has
    head_dim_v), random normal in the point's dtype. Layout bhnd allocates [B, H, N, D] contiguous and returns
    transposed views (the kernels read strides)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = DTYPES[point.dtype]
    value_dim = getattr(point, "value_dim", point.head_dim)

    def make(seq: int, heads: int, dim: int) -> torch.Tensor:
        if point.layout == "bhnd":
            t = torch.randn(point.batch, heads, seq, dim, dtype=dtype, device=device, generator=gen)
            return t.transpose(1, 2)
        return torch.randn(point.batch, seq, heads, dim, dtype=dtype, device=device, generator=gen)

    q = make(point.seq, point.heads, point.head_dim)
    k = make(point.seq_k, point.kv_heads, point.head_dim)
    v = make(point.seq_k, point.kv_heads, value_dim)
    do = make(point.seq, point.heads, value_dim)
    return q, k, v, do


def point_inputs(point, device: str, seed: int) -> tuple:
    """(q, k, v, do, g, packing, sink) of a point: make_inputs' tensors (or the packed ones and their Packing; else
    None), the forget gate and the sink (None without one)."""
    packing = None
    if getattr(point, "doc_lens", None) is not None:  # a packed varlen batch
        q, k, v, do, packing = varlen_inputs.make_inputs(point, device, seed)
    else:
        q, k, v, do = make_inputs(point, device, seed)
    return q, k, v, do, make_gate(point, q, device, seed), packing, make_sink(point, device, seed)


def prepare_backward(variant, point, problem, inputs: tuple):
    """variant.prepare on point_inputs' tuple: runs the forward once and returns the backward closure."""
    q, k, v, do, g, packing, sink = inputs
    modifiers = {"mods": problem.mods, "g": g} if problem.modifiers else {}  # baselines' prepare: no keywords
    if sink is not None:
        modifiers["sink"] = sink
    from variants.base import TritonVariant
    if getattr(point, "forward", "stock") != "stock" and isinstance(variant, TritonVariant):
        modifiers["forward"] = point.forward  # the forward choice (kernels/forward_choice.py); a baseline runs its own
    return variant.prepare(q, k, v, do, point.causal, default_scale(point.head_dim), point.blocks,
                           **({} if packing is None else {"varlen": packing}), **modifiers)


def forward_choice(variant, point) -> str | None:
    """The forward a Triton design's call names (the point's `forward`; None: the design's default_forward); None
    for a baseline, which runs its own."""
    from variants.base import TritonVariant
    return point.forward if isinstance(variant, TritonVariant) else None


def gate(outs, inputs: tuple, point, problem, scale: float) -> dict:
    """The accuracy columns of one call's outputs: the backward's (dq, dk, dv[, dg][, dsink]); timed = forward:
    (o, lse or None); train: (o, lse or None, *grads), both gates (runners/point/timed.py)."""
    q, k, v, do, g, packing, sink = inputs
    timed, dtype = getattr(point, "timed", "backward"), DTYPES[point.dtype]
    if timed == "backward":
        return check_accuracy(outs, q, k, v, do, point.causal, scale, dtype, varlen=packing, mods=problem.mods, g=g,
                              sink=sink)
    forward = timed_kinds.check_forward(outs[0], outs[1], q, k, v, point.causal, scale, dtype, varlen=packing,
                                        mods=problem.mods, g=g, sink=sink)
    if timed == "forward":
        return forward
    backward = check_accuracy(outs[2:], q, k, v, do, point.causal, scale, dtype, varlen=packing, mods=problem.mods,
                              g=g, sink=sink)
    return timed_kinds.merge_gates(forward, backward)


def forward_columns(variant, point, problem, inputs: tuple) -> dict:
    """`forward_ran`: the forward whose O and LSE the backward read (stock, gluon, gluon.<variant>; `own` for a
    baseline, which runs its own), `forward_reason`: why a point that asked for another ran stock ('' otherwise)."""
    from kernels.forward_choice import chosen_forward
    from variants.base import TritonVariant
    if not isinstance(variant, TritonVariant):
        return {"forward_ran": "own", "forward_reason": ""}
    q, k, v, do, g, packing, sink = inputs
    if packing is not None:
        q, k, v = (t.unsqueeze(0) for t in (q, k, v))
    run = chosen_forward(getattr(point, "forward", "stock"), q, k, v, point.causal, varlen=packing, mods=problem.mods,
                         gate=g, sink=sink)
    return {"forward_ran": run.name, "forward_reason": run.reason}


def make_sink(point, device: str, seed: int):
    """A sink point's logits: fp32 [H] randn (the size of a row's scores), under their own generator (seed + 2) so
    that q, k, v, do stay those of the point without a sink; None when the point has none."""
    if not getattr(point, "sink", False):
        return None
    gen = torch.Generator(device=device).manual_seed(seed + 2)
    return torch.randn(point.heads, dtype=torch.float32, device=device, generator=gen)


def make_gate(point, q, device: str, seed: int):
    """FLA's log forget gate for a gated point: g = logsigmoid(randn + 2), fp32, shaped like q without its head dim
    ([B, Nq, H]; packed: [total_q, H]), under its own generator (seed + 1) so q, k, v, do stay those of the
    ungated point; None when the point has no gate."""
    if not point.gate:
        return None
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    noise = torch.randn(tuple(q.shape[:-1]), dtype=torch.float32, device=device, generator=gen)
    return torch.nn.functional.logsigmoid(noise + 2.0)


def chunked_reference_grads(q, k, v, do, causal: bool, scale: float, mods=NO_MODIFIERS, g=None, sink=None):
    """variants.reference.reference_grads (fp32), over query chunks so each call's fp32 scores stay under
    REF_CHUNK_BYTES (accuracy_scope). Exact: softmax rows are independent, so dq is per chunk and dk/dv sum over chunks;
    causal chunks [a, b) get the keys [0, b + Nk - Nq), which keeps the bottom-right alignment.
    With score modifiers (mods: window / softcap; g: the forget gate) the reference runs in one call, on the
    accuracy scope: a chunk would move the window's diagonal and restart the gate's cumsum; a sink (fp32 [H]) too,
    as its gradient sums over every row. -> (dq, dk, dv[, dg][, dsink])."""
    batch, seq_q, heads, _ = q.shape
    seq_k = k.shape[1]
    if mods.active or g is not None or sink is not None:
        _, *grads = reference_grads(q, k, v, do, causal, scale, window_size=(mods.window_left, mods.window_right),
                                    softcap=mods.softcap, g=g, sink=sink)
        return tuple(grads)
    rows = chunk_rows(batch, heads, seq_k)
    if rows >= seq_q:
        _, dq, dk, dv = reference_grads(q, k, v, do, causal, scale)
        return dq, dk, dv
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
    dv = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
    for start in range(0, seq_q, rows):
        stop = min(seq_q, start + rows)
        keys = min(seq_k, stop + seq_k - seq_q) if causal else seq_k
        if keys <= 0:
            continue  # these queries see no key: zero output, zero gradient
        _, dq_c, dk_c, dv_c = reference_grads(q[:, start:stop], k[:, :keys], v[:, :keys], do[:, start:stop],
                                              causal, scale)
        dq[:, start:stop] = dq_c
        dk[:, :keys] += dk_c
        dv[:, :keys] += dv_c
    return dq, dk, dv


def check_accuracy(grads, q, k, v, do, causal: bool, scale: float, dtype, varlen=None, mods=NO_MODIFIERS,
                   g=None, sink=None) -> dict:
    """Error columns of one backward's (dq, dk, dv[, dg][, dsink]) against the fp32 reference (a packed batch: per
    document); mods / g: the point's score modifiers (window, softcap; the forget gate); sink: fp32 [H] or None
    (dsink sums over the batch and every head's rows, so it is checked over the whole problem on every scope: on a
    sliced one against reference_rows.reference_dsink, from the fp32 forward's O and LSE in query chunks)."""
    reference = functools.partial(chunked_reference_grads, mods=mods)
    if varlen is not None:
        ref = varlen_inputs.packed_reference_grads(q, k, v, do, causal, scale, varlen, reference, g=g, sink=sink)
        names = ["dq", "dk", "dv"] + (["dg"] if g is not None else []) + (["dsink"] if sink is not None else [])
        return _error_columns(grads, ref, dtype, "full-per-document", names)
    one_call = g is not None or mods.active or sink is not None  # no query chunks: the whole scope in one call
    scope = reference_scope(q, k, accuracy_scope.REF_CHUNK_BYTES if one_call else None)
    q_slice, k_slice = scope_slice(q, k, scope)
    ref = None
    try:
        ref = reference(q_slice(q), k_slice(k), k_slice(v), q_slice(do), causal, scale, g=sliced_gate(q_slice, g),
                        sink=sliced_sink(q, q_slice, sink))
    except torch.cuda.OutOfMemoryError:
        if scope != "full":
            raise
    if ref is None:  # the full reference did not fit next to the inputs: check the slice
        gc.collect()  # (outside the except block, so the failed attempt's tensors are gone)
        torch.cuda.empty_cache()
        scope = "batch0-kvgroup0"
        q_slice, k_slice = scope_slice(q, k, scope)
        ref = reference(q_slice(q), k_slice(k), k_slice(v), q_slice(do), causal, scale, g=sliced_gate(q_slice, g),
                        sink=sliced_sink(q, q_slice, sink))
    names = ["dq", "dk", "dv"] + (["dg"] if g is not None else [])
    outs = (q_slice(grads[0]), k_slice(grads[1]), k_slice(grads[2])) + tuple(q_slice(dg) for dg in grads[3:len(names)])
    ref = tuple(ref)  # (dq, dk, dv[, dg][, dsink]) of the scope
    if sink is not None:  # the whole dsink on every scope: it sums over every batch entry and row, so a sliced
        outs, names = outs + (grads[-1],), names + ["dsink"]  # scope's own is not comparable; there the reference
        if scope != "full":  # is the fp32 forward's over every row, in query chunks (issue 47)
            ref = ref[:-1] + (reference_dsink(q, k, v, do, causal, scale, sink, mods, g),)
    return _error_columns(outs, ref, dtype, scope, names)


def _error_columns(outs, ref, dtype, scope: str, names=("dq", "dk", "dv", "dg")) -> dict:
    cols = {"accuracy_scope": scope}
    bad = []
    for name, out, r in zip(names, outs, ref):
        err = error(out, r)
        cols[f"max_abs_{name}"] = err.max_abs
        cols[f"rel_{name}"] = err.rel
        if not err.ok(dtype):
            bad.append(f"rel_{name}={err.rel:.3g}")
    cols["correct"] = not bad
    cols["_wrong_reason"] = (f"{' '.join(bad)} > tolerance {REL_TOL[dtype]:g} for {dtype}".replace("torch.", "")
                             if bad else "")
    return cols


def run_once(fn, on_gpu: bool, device: str):
    """One backward call -> (grads, peak_mem_bytes above what was allocated before; None on CPU)."""
    if not on_gpu:
        return fn(), None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    grads = fn()
    torch.cuda.synchronize(device)
    return grads, torch.cuda.max_memory_allocated(device) - before


def _quantiles(times_ms: list[float]) -> list[float]:
    t = torch.tensor(times_ms, dtype=torch.float64)
    return [float(torch.quantile(t, q)) for q in QUANTILES]


def _bench_events(fn, warmup_ms: float, rep_ms: float) -> list[float]:
    """do_bench without the L2 flush: CUDA events around every call, L2 left warm."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-6)
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    n_repeat = max(1, int(rep_ms / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return _quantiles([s.elapsed_time(e) for s, e in zip(starts, ends)])


def _bench_wall_clock(fn, warmup: int, rep: int) -> list[float]:
    """CPU interpreter: time.perf_counter around each call (not a GPU timing: timing_meaningful=False)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rep):
        tic = time.perf_counter()
        fn()
        times.append((time.perf_counter() - tic) * 1e3)
    return _quantiles(times)


def time_fn(fn, bench, timer: str) -> list[float]:
    """[ms median, ms p20, ms p80] of `fn` alone."""
    if timer == "wall_clock":
        return _bench_wall_clock(fn, int(bench.cpu_warmup), int(bench.cpu_rep))
    if timer == "do_bench_cudagraph":
        return list(triton.testing.do_bench_cudagraph(fn, rep=bench.rep, quantiles=QUANTILES))
    if timer == "do_bench":  # zeroes an L2-sized cache buffer before every rep
        return list(triton.testing.do_bench(fn, warmup=bench.warmup, rep=bench.rep, quantiles=QUANTILES))
    return _bench_events(fn, bench.warmup, bench.rep)


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12 if ms and ms > 0 else math.nan


EMPTY = {"ms": math.nan, "ms_p20": math.nan, "ms_p80": math.nan, "tflops": math.nan, "tflops_p20": math.nan,
         "tflops_p80": math.nan, "executed_tflops": math.nan, "pct_peak": math.nan,
         "flops": math.nan, "executed_flops": math.nan, "peak_mem_bytes": math.nan, "workspace_bytes": math.nan,
         "correct": None, "accuracy_scope": None,
         "max_abs_dq": math.nan, "max_abs_dk": math.nan, "max_abs_dv": math.nan,
         "rel_dq": math.nan, "rel_dk": math.nan, "rel_dv": math.nan,
         "max_abs_dg": math.nan, "rel_dg": math.nan,  # dg: the forget gate's gradient (gated points only)
         "max_abs_dsink": math.nan, "rel_dsink": math.nan,  # dsink: the sink's gradient (sink points only, issue 47)
         "max_abs_o": math.nan, "rel_o": math.nan,  # timed = forward / train: O against the reference
         "max_abs_lse": math.nan, "rel_lse": math.nan,  # ... and the base-2 LSE, where the design exposes it
         "forward_ran": None, "forward_reason": None}  # the forward the backward read (forward_columns)


def not_measured(point, timer: str, status: str, reason: str) -> dict:
    """The measurement columns of a point decided without running it (runners/point/cpu_cost.py: skipped over the CPU
    budget, unsupported bf16 in the interpreter): no timing, no accuracy, the FLOP-convention FLOPs."""
    flops = timed_kinds.flops(point.problem("cpu"), getattr(point, "timed", "backward"))
    return {**EMPTY, "flops": flops, "timing_meaningful": False, "timer": timer,
            "status": status, "reason": reason, **ncu.EMPTY, "ncu_note": f"not profiled: point {status}"}


def nsight(point, bench, *, device: str, gpu_index: int, seed: int, top_kernel: str | None) -> dict:
    """runners/point/ncu.py's columns of an ok point: this process's cached memory is handed back first (the child
    makes its own inputs), the variant's module travels as a plugin (a design registered outside `variants`)."""
    gc.collect()
    torch.cuda.empty_cache()
    try:
        capability = tuple(torch.cuda.get_device_capability(device))
        plugins = (type(variants.get(point.variant)).__module__,)
    except Exception as exc:  # noqa: BLE001
        return {**ncu.EMPTY, "ncu_note": f"ncu failed: {one_line(exc)}"}
    return ncu.explain(point, bench, on_gpu=True, gpu_index=gpu_index, seed=seed, top_kernel=top_kernel,
                       plugins=plugins, capability=capability)


def measure(point, bench, *, timer: str, gpu_index: int = 0, seed: int = 0, peak_tflops: float | None = None) -> dict:
    """The measurement columns of one point, with `status` and `reason`. Never raises for a failing point."""
    interpreting = env.interpreting()
    device = env.torch_device(gpu_index)
    on_gpu = not interpreting
    variant = variants.get(point.variant)
    problem = point.problem("cpu" if interpreting else "cuda")
    row = {**EMPTY, **profile.EMPTY, **ncu.not_run(bench, on_gpu=on_gpu)}
    row["timing_meaningful"] = on_gpu
    row["timer"] = timer
    timed = getattr(point, "timed", "backward")
    try:
        row["flops"] = timed_kinds.flops(problem, timed)
        row["executed_flops"] = timed_kinds.executed_flops(variant, problem, point.blocks, timed)
        row["workspace_bytes"] = timed_kinds.workspace_bytes(variant, problem, point.blocks, timed)
        unsupported = variant.supports(problem) or timed_kinds.unsupported(variant, timed)
    except Exception as exc:  # noqa: BLE001 - a variant's bookkeeping bug is this point's error, not the sweep's
        return {**row, "status": "error", "reason": f"variant: {one_line(exc)}"}
    if unsupported is not None:
        return {**row, "status": "unsupported", "reason": " ".join(str(unsupported).split())}

    status, reason, stage = "ok", "", "inputs"
    q = k = v = do = g = sink = fn = grads = None
    oom = False
    try:
        if on_gpu:
            torch.cuda.set_device(device)
        q, k, v, do, g, packing, sink = point_inputs(point, device, seed)
        scale = default_scale(point.head_dim)
        stage = "prepare"
        row.update(forward_columns(variant, point, problem, (q, k, v, do, g, packing, sink)))
        inputs = (q, k, v, do, g, packing, sink)
        fn = (prepare_backward(variant, point, problem, inputs) if timed == "backward" else
              timed_kinds.prepare(variant, point, problem, inputs, forward_choice(variant, point)))
        stage = "backward" if timed == "backward" else timed
        grads, peak = run_once(fn, on_gpu, device)
        row["peak_mem_bytes"] = math.nan if peak is None else int(peak)
        stage = "accuracy"
        row.update(gate(grads, inputs, point, problem, scale))
        wrong_reason = row.pop("_wrong_reason")
        grads = None
        if not row["correct"]:
            status, reason = "wrong", wrong_reason
        stage = "timing"
        ms, ms_p20, ms_p80 = time_fn(fn, bench, timer)
        row.update(ms=ms, ms_p20=ms_p20, ms_p80=ms_p80)
        row.update(profile.explain(fn, on_gpu=on_gpu, device=device))  # after the timing; never raises
    except Exception as exc:  # noqa: BLE001 - every failure becomes a row; the sweep goes on
        failed = classify(exc, from_variant=stage in ("prepare", "backward", "forward", "train", "timing"))
        oom = failed == "oom"
        message = f"{stage}: {one_line(exc) if failed != 'crashed' else first_line(exc)}"
        if status == "wrong":
            reason = f"{reason}; then {failed} in {message}"
        else:
            status, reason = failed, message
    q = k = v = do = g = sink = fn = grads = packing = inputs = None  # noqa: F841 - free them before the next point
    if oom and on_gpu:
        gc.collect()
        torch.cuda.empty_cache()
    if status == "ok" and on_gpu and ncu.enabled(bench) and timed != "backward":
        row["ncu_note"] = f"not profiled: timed={timed} (ncu profiles the backward)"
    elif status == "ok" and on_gpu and ncu.enabled(bench):  # after timing and profile; its own process; never raises
        row.update(nsight(point, bench, device=device, gpu_index=gpu_index, seed=seed, top_kernel=row["top_kernel"]))

    if status == "ok":  # a wrong point keeps its ms but is never reported as a throughput
        row["tflops"] = tflops(row["flops"], row["ms"])
        row["tflops_p20"] = tflops(row["flops"], row["ms_p20"])  # from ms_p20: the faster end
        row["tflops_p80"] = tflops(row["flops"], row["ms_p80"])
        row["executed_tflops"] = tflops(row["executed_flops"], row["ms"])
        if peak_tflops:
            row["pct_peak"] = 100.0 * row["tflops"] / peak_tflops
    row.pop("_wrong_reason", None)
    return {**row, "status": status, "reason": reason}
