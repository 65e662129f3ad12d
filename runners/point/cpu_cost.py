"""What a point costs in the Triton interpreter on the CPU, estimated before it runs; the budget rule.

The interpreter runs every program of a grid one after another in Python, and every loop iteration of a
program (one [BLOCK_M, BLOCK_N] tile of queries x keys, a "tile step") costs a fixed Python overhead plus
numpy work proportional to BLOCK_M * BLOCK_N * BLOCK_D. So the estimate counts tile steps of every kernel a
point launches (the forward once, the backward `1 + cpu_warmup + cpu_rep` times: the accuracy call, then the
timed ones) and adds the fp32 reference's matmuls in torch, a fixed cost per point (inputs, the first call's parsing,
the accuracy check's set-up) and, for the first point a process estimates, the process's start (STARTUP_S), so the
row's `cpu_estimate_s` of a one-point run is the command's wall time. Counting uses only the resolved block fields
(BLOCK_M1/BLOCK_N1 and BLOCK_M2/BLOCK_N2 passes, or BLOCK_M/BLOCK_N), so a new Triton variant with the same
field names is covered; anything else is estimated by its FLOPs alone.

Constants calibrated once (below) on the development machine, in wall-clock seconds there. The estimate is meant to
within a factor of about 2: it decides "seconds or hours", not a timing.
"""
import contextlib
import threading
import time

# Calibration (issue 45): Triton 3.9 interpreter, torch 2.13 CPU, 2 x86 cores shared with other jobs (the
# development machine, load average 4-10 while measuring). CPU time of one backward at B1 H2 N256: two_pass D64
# (default 64x64 / 128x64 blocks) 1.56 s, fp32 1.50 s, D32 1.01 s, 16x16 blocks 12.6 s; atomic D64 0.73 s; a
# forward 0.6 s: ~11 ms per tile step and ~5e-8 s per element (the constants of 2026-11 were 3.8 ms and 2e-8, 3x
# low). Wall clock there was 2-2.6x the CPU time (the other jobs), and the constants are that wall time: the
# README's command (B1 H2 N256 D64 fp16, 1 + 1 + 3 backwards) took 55 s and 77 s wall at load 4-7 (issue 45: 41 s),
# 24 s and 26 s at load 2.8 (~17 s of CPU each); at load 7, 18-20 s of it were the process's start (a run whose
# point is skipped at once), 1.4 s the forward, 3.2-7 s each backward (1.6 s at load 2.8), 1.7 s the accuracy
# check. Its estimate at these constants: 42 s. On an idle machine expect about half the estimate.
# tests/test_cpu_cost.py checks the counting and the README command's estimate at these constants, never a timing.
STEP_S = 28e-3  # fixed Python cost of one tile step (some 60 interpreted tl ops)
ELEMENT_S = 1.3e-7  # per BLOCK_M * BLOCK_N * BLOCK_D element of a tile step (numpy matmuls, exp2, casts)
TORCH_FLOP_S = 1 / 20e9  # the fp32 reference in torch on the CPU: ~20 GFLOP/s
FIXED_S = 3.0  # inputs, the first call's parsing of each kernel, the accuracy check's set-up and comparison
STARTUP_S = 18.0  # once per process: Python, torch, Triton and the kernels imported, Hydra, the git state, the row
PROGRESS_AFTER_S = 10.0  # points estimated longer than this print progress while they run (FIXED_S alone is 3)
PROGRESS_EVERY_S = 5.0  # at least this long between two progress lines

FORWARD_BLOCKS = (64, 64)  # kernels.forward.attention_forward's BLOCK_M, BLOCK_N (BLOCK_N 32 for D > 128)
DELTA_BLOCK_M = 64  # kernels.preprocess.attention_delta


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def head_block(head_dim: int) -> int:
    """kernels.common.head_block without importing Triton: the next power of two, at least 16."""
    return max(16, 1 << (max(1, head_dim) - 1).bit_length())


def tile_pairs(seq_q: int, seq_k: int, block_m: int, block_n: int, causal: bool) -> int:
    """(query block, key block) pairs holding at least one visible (query, key) pair, for one head.
    Causal is bottom-right aligned: query i sees key j iff j <= i + seq_k - seq_q."""
    if not causal:
        return cdiv(seq_q, block_m) * cdiv(seq_k, block_n)
    shift = seq_k - seq_q
    pairs = 0
    for start in range(0, seq_q, block_m):
        keys = min(seq_k, min(seq_q, start + block_m) + shift)  # keys seen by the block's last query
        if keys > 0:
            pairs += cdiv(keys, block_n)
    return pairs


def passes(blocks: dict, head_dim: int) -> list[tuple[int, int]]:
    """(BLOCK_M, BLOCK_N) of every tile sweep one backward makes, from the resolved block fields."""
    if "BLOCK_M1" in blocks and "BLOCK_N1" in blocks:  # two_pass, fused: dK/dV sweep, then dQ sweep
        return [(blocks["BLOCK_M1"], blocks["BLOCK_N1"]), (blocks["BLOCK_M2"], blocks["BLOCK_N2"])]
    if "BLOCK_M" in blocks and "BLOCK_N" in blocks:  # atomic, atomic_tma: one sweep (+ a dQ sweep when deterministic)
        sweeps = [(blocks["BLOCK_M"], blocks["BLOCK_N"])]
        return sweeps + ([(blocks["BLOCK_N"], blocks["BLOCK_M"])] if blocks.get("deterministic") else [])
    return []


def documents(problem) -> list[tuple[int, int]]:
    """(query length, key length) of every sequence: the batch, or the documents of a packed varlen batch."""
    lens_q = getattr(problem, "lens_q", None)
    if lens_q:
        return list(zip(lens_q, getattr(problem, "lens_k", None) or lens_q))
    return [(problem.seq_q, problem.seq_k)] * problem.batch


def sweep_seconds(problem, block_m: int, block_n: int) -> float:
    """One sweep of the problem's visible tiles: every (sequence, query head) walks them once."""
    steps = problem.heads * sum(tile_pairs(nq, nk, block_m, block_n, problem.causal) for nq, nk in documents(problem))
    return steps * (STEP_S + ELEMENT_S * block_m * block_n * head_block(problem.head_dim))


def estimate_seconds(problem, blocks: dict, *, triton_kernels: bool, backward_calls: int,
                     reference_flops: float, timed: str = "backward") -> float:
    """Seconds the interpreter needs for one point: forward once, `backward_calls` backwards, the reference.
    timed (runners/point/timed.py): forward, `backward_calls` forwards and no backward; train, `backward_calls`
    forwards and backwards."""
    seconds = FIXED_S + TORCH_FLOP_S * reference_flops
    if not triton_kernels:  # a torch baseline on the CPU: its own FLOPs at torch speed, per call
        return seconds + TORCH_FLOP_S * reference_flops * (backward_calls + 1)
    fwd_n = FORWARD_BLOCKS[1] if problem.head_dim <= 128 else 32
    forward = sweep_seconds(problem, FORWARD_BLOCKS[0], fwd_n)
    delta = problem.heads * sum(cdiv(nq, DELTA_BLOCK_M) for nq, _ in documents(problem)) * STEP_S
    backward = delta + sum(sweep_seconds(problem, m, n) for m, n in passes(blocks, problem.head_dim))
    if timed == "forward":
        return seconds + forward * backward_calls
    if timed == "train":
        return seconds + (forward + backward) * backward_calls
    return seconds + forward + backward * backward_calls


def human(seconds: float) -> str:
    """~40 s, ~12 min, ~2 h, ~3 d: the order of magnitude a reader needs."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 1.5 * size:
            return f"~{round(seconds / size)} {unit}"
    return f"~{max(1, round(seconds))} s"


SMALL_HINT = "seq=256 batch=1 heads=2 head_dim=64 dtype=fp16"  # the README's CPU command, verbatim


def skip_reason(label: str, seconds: float, budget_s: float, dtype: str = "fp16") -> str:
    """The one-line reason of a `skipped` row, with the README's CPU command (fits the budget; any dtype: bf16 is
    unsupported in the interpreter, fp16 is the README's)."""
    return (f"{label} needs {human(seconds)} in the CPU interpreter (cpu_budget_s={budget_s:g}); "
            f"run on a GPU or try `{SMALL_HINT}`")


def shape_label(point) -> str:
    """B4 H16 N4096 D128 (Nq x Nk and H/Hkv when they differ)."""
    seq = f"{point.seq}" if point.seq == point.seq_k else f"{point.seq}x{point.seq_k}"
    heads = f"{point.heads}" if point.heads == point.kv_heads else f"{point.heads}/{point.kv_heads}"
    return f"B{point.batch} H{heads} N{seq} D{point.head_dim}"


def reference_flops(problem) -> float:
    """FLOPs of the fp32 reference forward + backward in torch (5 matmuls of B*H*Nq*Nk*D, causal not skipped)."""
    return 2.0 * 5 * problem.heads * problem.head_dim * sum(nq * nk for nq, nk in documents(problem))


def backward_calls(bench) -> int:
    """Backwards one point runs: the accuracy call, `cpu_warmup` untimed, `cpu_rep` timed (runners.point.measure)."""
    return 1 + int(bench.cpu_warmup) + int(bench.cpu_rep)


_started = False  # whether this process has estimated a point: only its first carries STARTUP_S


def estimate_point(point, bench) -> float:
    """Seconds the CPU interpreter needs for a checked runners.point.schema.Point: what the budget rule and the
    progress lines judge (the process's start is not the point's; see start_cost)."""
    import variants
    from variants.base import TritonVariant

    problem = point.problem("cpu")
    return estimate_seconds(problem, point.blocks_dict,
                            triton_kernels=isinstance(variants.get(point.variant), TritonVariant),
                            backward_calls=backward_calls(bench), reference_flops=reference_flops(problem),
                            timed=getattr(point, "timed", "backward"))


def start_cost() -> float:
    """STARTUP_S for the process's first point, else 0: added to the row's `cpu_estimate_s`, so a one-point run's
    estimate is the command's wall time."""
    global _started
    startup, _started = (0.0 if _started else STARTUP_S), True
    return startup


BF16_REASON = ("bf16 dots are not exact in the Triton interpreter (its gradients would fail the accuracy check "
               "of a correct kernel); run bf16 on a GPU, or use dtype=fp16 or fp32 on the CPU")


def refusal(point, estimate_s: float, budget_s: float) -> tuple[str, str] | None:
    """(status, reason) for a point the CPU interpreter must not run, else None: `skipped` over the budget
    (re-estimated on every run, so a larger cpu_budget_s runs it), `unsupported` for a Triton variant in bf16."""
    if estimate_s > budget_s:
        return "skipped", skip_reason(shape_label(point), estimate_s, budget_s, point.dtype)
    import variants
    from variants.base import TritonVariant

    if point.dtype == "bf16" and isinstance(variants.get(point.variant), TritonVariant):
        return "unsupported", BF16_REASON
    return None


@contextlib.contextmanager
def progress(estimate_s: float | None, prefix: str, out, after_s: float = PROGRESS_AFTER_S,
             every_s: float | None = None):
    """While the body runs: for a point estimated over `after_s`, one line now and one every `every_s`
    (default: 5 s or a sixth of the estimate, whichever is longer)."""
    if estimate_s is None or estimate_s < after_s:
        yield
        return
    every = every_s or max(PROGRESS_EVERY_S, estimate_s / 6)
    out(f"{prefix}: running in the CPU interpreter, estimated {human(estimate_s)}")
    start, stop = time.monotonic(), threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            out(f"{prefix}: ... {time.monotonic() - start:.0f} s (estimated {human(estimate_s)})")

    ticker = threading.Thread(target=tick, name="cpu-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
