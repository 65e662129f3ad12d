"""`python -m runners.host_cost`: the host cost of one eager call (issue 44): per-call wall time of an eager
`attention(...)` forward + backward on small shapes, for every design and baseline; one row per (shape, design, call
path), `bench_kind=host_cost`, in the same tables as runners.sweep and runners.model_step
(results/<gpu>/<sweep_id>/*.parquet), tracked across commits by runners.regress like model-step rows.

    python -m runners.host_cost                                         # CPU: interpreter, tiny shape, few calls
    python -m runners.host_cost seq=128,1024 dtype=bf16 rep=200         # GPU: every design and baseline

A call is `o = attention(q, k, v, causal=..., variant=...)` then `torch.autograd.grad(o, (q, k, v), do)` on the
same leaves every time (no gradient accumulation). Each of `rep` calls after `warmup` is timed on the host with
perf_counter and no synchronisation, in `rounds` blocks interleaved across the shape's designs (the order rotated
each round, so a slow spell of the host is shared rather than pinned on one design), so on a GPU the time is what
the host spends (dispatch, checks, launches) as long as the GPU keeps up, which small shapes ensure; `wall_ms_mean`
adds each block's final synchronisation. `ms` is the mean host ms per call (p20 / p80 of the single calls beside
it). The first call's gradients and those of a warm call after the timed ones (on a GPU: bound launches,
kernels/launch.py) are checked against the fp32 reference (status wrong otherwise).

Call paths: a Triton design runs `plan` (the eager path: the signature's launch plan, no operator dispatch;
variants/plan.py) and `operator` (torch.ops.flash_bwd.attention, what torch.compile traces; variants.op's
`through_operator`); a baseline (or a design that is no operator) runs `direct` (its own function). `plan_builds`
counts the plans built during the timed calls (0: nothing was re-validated).

Arguments (key=value): variant (comma-separated, or `all`: every registered design and baseline but the fp32
reference), path (comma-separated of plan, operator; default both), batch, seq (comma-separated), seq_k (default:
seq), heads, kv_heads, head_dim, dtype (fp16, bf16, fp32), causal, warmup, rep, rounds (GPU default 10), seed,
results_dir, sweep_id. On the
CPU (the Triton interpreter) the defaults shrink to a tiny fp32 shape and a few calls and rows say
timing_meaningful=false: the interpreter's kernel time swamps the host cost. A bad argument is one line on stderr and
exit code 2.
"""
import contextlib
import datetime
import json
import sys
import time
from dataclasses import dataclass, field

from runners.point import env

env.use_interpreter_without_gpu()  # before anything imports `variants`

import torch  # noqa: E402

from runners.tables import results  # noqa: E402
from variants import attention, get  # noqa: E402
from variants.accuracy import error  # noqa: E402
from variants.base import TritonVariant  # noqa: E402
from variants.problem import DTYPES, Problem  # noqa: E402
try:
    from runners.tables.columns import HOST_KIND  # noqa: E402
    from variants.op import through_operator  # noqa: E402
    from variants.plan import plans  # noqa: E402
except ImportError:  # a checkout before issue 44 (the "before" side, scripts/gpu_host_cost.sh): the operator only
    HOST_KIND, through_operator, plans = "host_cost", None, None
from variants.reference import reference_grads  # noqa: E402
from variants.registry import registered  # noqa: E402

EXIT_CONFIG = 2
ORACLE = "reference"
PATHS = ("plan", "operator")  # a Triton design's call paths; a baseline's is "direct"
GPU_DEFAULTS = {"batch": "1", "seq": "128,1024", "heads": "16", "kv_heads": "16", "head_dim": "128", "dtype": "bf16",
                "warmup": "20", "rep": "200", "rounds": "10"}
CPU_DEFAULTS = {"batch": "1", "seq": "16", "heads": "2", "kv_heads": "1", "head_dim": "16", "dtype": "fp32",
                "warmup": "2", "rep": "5", "rounds": "1"}
KEYS = ("variant", "path", "batch", "seq", "seq_k", "heads", "kv_heads", "head_dim", "dtype", "causal", "warmup",
        "rep", "rounds", "seed", "results_dir", "sweep_id")


class ConfigError(ValueError):
    """A bad argument: one line on stderr, exit code 2."""


def on_gpu() -> bool:
    return not env.interpreting()


def parse_args(argv: list[str]) -> dict:
    args = {"variant": "all", "path": ",".join(PATHS), "seq_k": None, "causal": "true", "seed": "0",
            "results_dir": "results", "sweep_id": None, **(GPU_DEFAULTS if on_gpu() else CPU_DEFAULTS)}
    for word in argv:
        if "=" not in word:
            raise ConfigError(f"arguments are key=value, got {word!r}")
        key, value = word.split("=", 1)
        if key not in KEYS:
            raise ConfigError(f"unknown argument {key!r}; known: {', '.join(KEYS)}")
        args[key] = value
    return args


def integer(args: dict, key: str, minimum: int = 1) -> int:
    try:
        value = int(args[key])
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"{key}={args[key]}: an integer >= {minimum}")
    return value


def variant_names(text: str) -> list[str]:
    names = [name for name in registered() if name != ORACLE] if text == "all" else text.split(",")
    for name in names:
        get(name)  # ValueError naming the known ones
    return names


def call_paths(text: str) -> list[str]:
    paths = text.split(",")
    for path in paths:
        if path not in PATHS:
            raise ConfigError(f"path={path}: one of {', '.join(PATHS)}")
    return paths


class Shape:
    """One shape of the run: [B, N, H, D] inputs of one dtype."""

    def __init__(self, args: dict, seq: int):
        self.batch, self.seq = integer(args, "batch"), seq
        self.seq_k = integer(args, "seq_k") if args["seq_k"] is not None else seq
        self.heads, self.kv_heads, self.head_dim = (integer(args, key) for key in ("heads", "kv_heads", "head_dim"))
        if args["dtype"] not in DTYPES:
            raise ConfigError(f"dtype={args['dtype']}: one of {', '.join(DTYPES)}")
        if not on_gpu() and args["dtype"] == "bf16":
            raise ConfigError("dtype=bf16 needs a GPU (the interpreter's bf16 dots are not exact)")
        self.dtype = args["dtype"]
        if args["causal"] not in ("true", "false"):
            raise ConfigError(f"causal={args['causal']}: true or false")
        self.causal = args["causal"] == "true"
        self.problem = Problem(self.batch, self.seq, self.seq_k, self.heads, self.kv_heads, self.head_dim,
                               self.causal, DTYPES[self.dtype], "cuda" if on_gpu() else "cpu")
        self.problem.validate()

    def columns(self) -> dict:
        return {"batch": self.batch, "seq": self.seq, "seq_k": self.seq_k, "heads": self.heads,
                "kv_heads": self.kv_heads, "head_dim": self.head_dim, "dtype": self.dtype, "causal": self.causal,
                "layout": "bnhd", "modifiers": ""}

    def inputs(self, seed: int) -> tuple:
        """Leaves q, k, v (requires_grad) and do, on the run's device."""
        gen = torch.Generator().manual_seed(seed)
        dtype, device = DTYPES[self.dtype], self.problem.device
        shapes = [(self.batch, self.seq, self.heads, self.head_dim)] + \
            [(self.batch, self.seq_k, self.kv_heads, self.head_dim)] * 2 + [(self.batch, self.seq, self.heads,
                                                                           self.head_dim)]
        q, k, v, do = (torch.randn(s, generator=gen).to(device=device, dtype=dtype) for s in shapes)
        return (*(t.requires_grad_(True) for t in (q, k, v)), do)


def one_call(variant: str, shape: Shape, q, k, v, do):
    """One eager forward + backward -> (dq, dk, dv)."""
    o = attention(q, k, v, causal=shape.causal, variant=variant)
    return torch.autograd.grad(o, (q, k, v), do)


def sync() -> None:
    if on_gpu():
        torch.cuda.synchronize()


def check(variant: str, shape: Shape, q, k, v, do) -> dict:
    """The first call's gradients against the fp32 reference: status ok / wrong and the relative errors."""
    got = one_call(variant, shape, q, k, v, do)
    want = reference_grads(q.detach(), k.detach(), v.detach(), do, shape.causal)[1:]
    errors = {name: error(g.detach().float(), w) for name, g, w in zip(("dq", "dk", "dv"), got, want)}
    correct = all(e.ok(DTYPES[shape.dtype]) for e in errors.values())
    return {"status": "ok" if correct else "wrong", "correct": correct,
            **{f"rel_{name}": e.rel for name, e in errors.items()},
            "reason": "" if correct else "gradients off the fp32 reference: " + ", ".join(
                f"{name} {e.rel:.3g}" for name, e in errors.items())}


def time_block(call, calls: int) -> list[float]:
    """Host ms of each of `calls` single calls, unsynchronised."""
    times = []
    for _ in range(calls):
        tic = time.perf_counter()
        call()
        times.append((time.perf_counter() - tic) * 1e3)
    return times


def stats(times: list[float], wall_ms: float) -> dict:
    """mean (`ms`), p20, p80 and median of the single calls, and the wall ms per call with synchronisation."""
    ordered = torch.tensor(times, dtype=torch.float64)
    p20, p50, p80 = (float(torch.quantile(ordered, p)) for p in (0.2, 0.5, 0.8))
    return {"ms": float(ordered.mean()), "ms_p20": p20, "ms_p80": p80, "host_ms_median": p50,
            "wall_ms_mean": wall_ms}


@dataclass
class Point:
    """One row's design and call path on one shape, its inputs, and what its timed rounds gathered."""
    variant: str
    path: str
    row: dict  # the measured columns so far (status, errors, or a failure's reason)
    inputs: tuple = ()
    times: list = field(default_factory=list)
    wall_ms: float = 0.0
    builds: float = 0.0

    @property
    def live(self) -> bool:
        return bool(self.inputs)

    def context(self):
        return through_operator() if self.path == "operator" and through_operator else contextlib.nullcontext()


def failed(exc: Exception) -> dict:
    """A point's row after an exception: its status (runners.point.measure's classes) and a one-line reason."""
    from runners.point.measure import classify, one_line
    return {"status": classify(exc, from_variant=True), "correct": False, "reason": one_line(exc)}


def plan_builds() -> float:
    """The launch plans built so far (NaN on a checkout before issue 44, which has none)."""
    return plans.builds if plans is not None else float("nan")


def prepare(variant: str, path: str, shape: Shape, seed: int, warmup: int) -> Point:
    """Check the first call against the reference and warm it up; a failure is a point with its row, not timed."""
    reason = get(variant).supports(shape.problem)
    if reason is not None:
        return Point(variant, path, {"status": "unsupported", "correct": False, "reason": reason})
    point = Point(variant, path, {}, shape.inputs(seed))
    try:
        with point.context():
            point.row = check(variant, shape, *point.inputs)
            for _ in range(warmup):
                one_call(variant, shape, *point.inputs)
        sync()
    except Exception as exc:  # noqa: BLE001 - one row per point, whatever the failure
        return Point(variant, path, failed(exc))
    return point


def time_rounds(points_: list[Point], shape: Shape, rep: int, rounds: int) -> None:
    """`rep` timed calls of each live point, in `rounds` interleaved blocks (point order rotated every round), so a
    drift of the host (another process, clocks) spreads over every design instead of landing on one."""
    live = [p for p in points_ if p.live]
    per_round = [rep // rounds + (1 if r < rep % rounds else 0) for r in range(rounds)]
    for r, calls in enumerate(per_round):
        turn = r % len(live) if live else 0
        for point in live[turn:] + live[:turn]:
            if not point.live:  # failed in an earlier round
                continue
            try:
                with point.context():
                    before, start = plan_builds(), time.perf_counter()
                    point.times += time_block(lambda: one_call(point.variant, shape, *point.inputs), calls)
                    sync()
                    point.wall_ms += (time.perf_counter() - start) * 1e3
                    point.builds += plan_builds() - before
            except Exception as exc:  # noqa: BLE001 - one row per point, whatever the failure
                point.row, point.inputs = failed(exc), ()


def finish(point: Point, shape: Shape) -> dict:
    """The row's measured columns: timing stats, plans built while timed, and a warm call's check; never raises."""
    if not point.live:
        return point.row
    row = {**point.row, **stats(point.times, point.wall_ms / len(point.times)), "plan_builds": point.builds}
    try:
        with point.context():
            warm = check(point.variant, shape, *point.inputs)  # on a GPU: bound launches (kernels/launch.py)
    except Exception as exc:  # noqa: BLE001 - one row per point, whatever the failure
        failure = failed(exc)
        return {**row, **failure, "reason": "warm call: " + failure["reason"]}
    if not warm["correct"]:
        row.update(status="wrong", correct=False, reason="warm call: " + warm["reason"])
    return row


def row_of(shape: Shape, variant: str, path: str, seed: int, warmup: int, rep: int, rounds: int, sweep_id: str,
           index: int, measured: dict, environment: dict) -> dict:
    key = json.dumps({"bench_kind": HOST_KIND, **shape.columns(), "variant": variant, "call_path": path,
                      "seed": seed}, sort_keys=True)
    return {"sweep_id": sweep_id, "point_index": index, "config_key": key, "bench_kind": HOST_KIND,
            "variant": variant, "call_path": path, "compile_mode": "eager", "compiled": False, **shape.columns(),
            "seed": seed, "warmup": warmup, "rep": rep, "rounds": rounds, "timing_meaningful": on_gpu(), **measured,
            **{k: v for k, v in environment.items() if not k.startswith("peak_tflops_")},
            "timestamp": env.utc_now()}


def environment_columns() -> dict:
    """runners.point.env's columns (as runners.model_step reads them)."""
    from runners.model.step import environment_columns as step_environment
    return step_environment()


def points(variants_: list[str], paths: list[str]) -> list[tuple[str, str]]:
    """(variant, call path) of every row of one shape: a Triton design on each path (a checkout before issue 44:
    `operator`, the only path there), a baseline once (direct)."""
    out = []
    paths = paths if through_operator is not None else ["operator"]  # before issue 44 every eager call took the op
    for variant in variants_:
        if isinstance(get(variant), TritonVariant) and get(variant).as_operator:
            out += [(variant, path) for path in paths]
        else:
            out.append((variant, "direct"))
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        variants_ = variant_names(args["variant"])
        paths = call_paths(args["path"])
        seqs = [int(s) for s in args["seq"].split(",")] if all(
            s.isdigit() for s in args["seq"].split(",")) else None
        if not seqs:
            raise ConfigError(f"seq={args['seq']}: comma-separated integers >= 1")
        shapes = [Shape(args, seq) for seq in seqs]
        warmup, rep, seed = integer(args, "warmup", 0), integer(args, "rep"), integer(args, "seed", 0)
        rounds = min(integer(args, "rounds"), rep)
    except (ConfigError, ValueError) as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    sweep_id = args["sweep_id"] or datetime.datetime.now().strftime("host_cost_%Y%m%d_%H%M%S")
    environment = environment_columns()
    directory = results.point_dir(args["results_dir"], environment["gpu"], sweep_id)
    print(f"host cost of one eager forward + backward call, mean of {rep} after {warmup} warm-up(s), the designs "
          f"interleaved in {rounds} round(s)"
          + ("" if on_gpu() else "; CPU interpreter: times are the interpreter's, not a GPU host's"))
    index = 0
    for shape in shapes:
        prepared = [prepare(variant, path, shape, seed, warmup) for variant, path in points(variants_, paths)]
        time_rounds(prepared, shape, rep, rounds)
        for point in prepared:
            row = row_of(shape, point.variant, point.path, seed, warmup, rep, rounds, sweep_id, index,
                         finish(point, shape), environment)
            key = results.resume_key(row["config_key"], environment["gpu_name"], environment["commit"],
                                     environment["diff_hash"])
            results.write_row(row, directory, index, key)
            print(progress(shape, point.variant, point.path, row))
            index += 1
    print(f"rows: {directory}")
    return 0


def progress(shape: Shape, variant: str, path: str, row: dict) -> str:
    head = f"N{shape.seq:<6} {variant:<16} {path:<9}"
    if row["status"] not in ("ok", "wrong"):
        return f"{head} {row['status']}: {row['reason']}"
    return (f"{head} {row['status']:<5} {row['ms']:8.3f} ms/call host (p20 {row['ms_p20']:.3f}, p80 "
            f"{row['ms_p80']:.3f}; with sync {row['wall_ms_mean']:.3f}), plans built while timed: "
            f"{row['plan_builds']}")


if __name__ == "__main__":
    sys.exit(main())
