"""The model-step benchmark: forward + backward + AdamW step of a small decoder (runners/model/decoder.py) whose attention
is each design and each baseline, eager and compiled; one row per (variant, compile mode), `bench_kind=model_step`,
in the same tables as runners.sweep (results/<gpu>/<sweep_id>/*.parquet; runners.merge flattens them).

    python -m runners.model_step model=tiny variant=two_pass                  # CPU smoke test (interpreter)
    python -m runners.model_step model=gpt_d64 seq=16384 compile=eager,default,reduce-overhead

Arguments (key=value): model (conf/model/<name>.yaml), variant (comma-separated, or `all`: every registered design
and baseline but the fp32 reference), compile (eager, default, reduce-overhead, max-autotune...; torch.compile's mode;
`eager-operator`: eager, every attention() call through the operator's dispatch, the path torch.compile traces, instead
of the eager plan path: issue 44's A/B of the host path in one process, docs/host_cost.md), baseline (the agreement
baseline; default: the first of sdpa_flash, sdpa_efficient, reference that runs the problem), truth (auto: an fp32-attention truth run for fp16 / bf16 models, none for fp32 ones; fp32; none),
point_timeout (seconds one (variant, mode) may take, compiles included; 0: no limit; past it the point is a `timeout`
row and the next one runs), seed, results_dir, sweep_id; any other key overrides the model file's (seq=16384, head_dim=128, ...).
Hydra is not needed. Every row is accuracy-gated by training agreement (runners/model/agreement.py). A bad argument is
one line on stderr and exit code 2.
"""
import contextlib
import datetime
import json
import math
import signal
import sys
import threading
import time

from runners.point import env

env.use_interpreter_without_gpu()  # before anything imports `variants`

import torch  # noqa: E402

from runners.model import agreement, decoder  # noqa: E402
from runners.model import config as model_config  # noqa: E402
from runners.tables import results  # noqa: E402
from runners.model.config import ConfigError  # noqa: E402
from variants import get  # noqa: E402
from variants.problem import DTYPES, Problem  # noqa: E402
from variants.registry import registered  # noqa: E402

BENCH_KIND = "model_step"
EXIT_CONFIG = 2
RUNNER_KEYS = {"model": "tiny", "variant": "all", "compile": None, "baseline": None, "truth": "auto",
               "point_timeout": "0", "seed": "0", "results_dir": "results", "sweep_id": None}
TRUTH_CHOICES = ("auto", "fp32", "none")
BASELINE_CHOICES = ("sdpa_flash", "sdpa_efficient", "reference")  # preference order; the first that runs is used
ORACLE = "reference"  # the fp32 test oracle: not a contender in `variant=all`


def parse_args(argv: list[str]) -> tuple[dict, dict]:
    """(runner arguments, model overrides) from key=value words."""
    runner, overrides = dict(RUNNER_KEYS), {}
    for word in argv:
        if "=" not in word:
            raise ConfigError(f"arguments are key=value, got {word!r}")
        key, value = word.split("=", 1)
        (runner if key in RUNNER_KEYS else overrides)[key] = value
    return runner, overrides


def on_gpu() -> bool:
    return not env.interpreting()


def variant_names(text: str) -> list[str]:
    names = [name for name in registered() if name != ORACLE] if text == "all" else text.split(",")
    for name in names:
        get(name)  # ValueError naming the known ones
    return names


EAGER_OPERATOR = "eager-operator"  # eager, attention() through the operator's dispatch (_ThroughOperator)
EAGER_MODES = ("eager", EAGER_OPERATOR)  # no torch.compile


def compile_modes(text: str | None) -> list[str]:
    if text is None:
        return ["eager", "default", "reduce-overhead"] if on_gpu() else ["eager", "default"]
    modes = text.split(",")
    if "reduce-overhead" in modes and not on_gpu():
        raise ConfigError("compile=reduce-overhead needs CUDA graphs (a GPU)")
    return modes


def problem_of(config: model_config.ModelConfig) -> Problem:
    """One layer's attention problem (what each design is asked to run)."""
    dtype = DTYPES[config.dtype]
    return Problem(config.batch, config.seq, config.seq, config.heads, config.kv_heads, config.head_dim, config.causal,
                   dtype, "cuda" if on_gpu() else "cpu")


class PointTimeout(Exception):
    """A (variant, mode) ran past point_timeout."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raises PointTimeout in the block after `seconds` (SIGALRM; 0, or off the main thread: no limit)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise PointTimeout(f"no result within point_timeout={seconds:g} s (compiles included)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def point_timeout(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise ConfigError(f"point_timeout={text}: seconds >= 0 (0: no limit)")
    return seconds


def wants_truth(text: str, config) -> bool:
    """Whether the gate measures an fp32-attention truth run (agreement.truth_verdict)."""
    if text not in TRUTH_CHOICES:
        raise ConfigError(f"truth={text}: one of {', '.join(TRUTH_CHOICES)}")
    return text == "fp32" or (text == "auto" and config.dtype != "fp32")


def sdpa_backends(problem: Problem) -> list[str]:
    """The SDPA baselines (from the registry) that run the problem: the implementations a design's distance to the
    fp32 truth is judged against."""
    from variants.sdpa import SdpaBackend
    return [name for name in registered()
            if isinstance(get(name), SdpaBackend) and get(name).supports(problem) is None]


class Gate:
    """What a design's loss curve is judged against: the baseline's curve and spread, and, given an fp32 truth run,
    its curve and the farthest SDPA backend's distance to it (runners/model/agreement.py)."""

    def __init__(self, reference_curve: list[float], spread: float, floor: float, truth_curve=None,
                 sdpa_truth_dev: float = math.nan):
        self.reference_curve, self.spread, self.floor = reference_curve, spread, floor
        self.truth_curve, self.sdpa_truth_dev = truth_curve, sdpa_truth_dev

    def judge(self, curve: list[float]) -> dict:
        deviation = agreement.max_deviation(curve, self.reference_curve)
        correct, tolerance, why = agreement.verdict(deviation, self.spread, self.floor)
        columns = {"loss_max_dev": deviation, "loss_spread": self.spread, "loss_tol": tolerance}
        if self.truth_curve is not None:
            truth_dev = agreement.max_deviation(curve, self.truth_curve)
            correct, truth_tol, why = agreement.truth_verdict(truth_dev, self.sdpa_truth_dev, self.spread,
                                                              self.floor)
            columns.update(loss_truth_dev=truth_dev, loss_sdpa_truth_dev=self.sdpa_truth_dev,
                           loss_truth_tol=truth_tol)
        return {"correct": correct, "reason": why, **columns}


def make_gate(config, baseline: str, problem: Problem, init_state: dict, seed: int, device: str, truth: bool) -> Gate:
    """The baseline's curve twice (its run-to-run spread); with `truth`, the fp32-attention curve and every SDPA
    backend's distance to it. Prints what it measured."""
    baseline_trainer = Trainer(config, baseline, "eager", init_state, device)
    reference_curve = baseline_trainer.curve(init_state, seed)
    spread = agreement.max_deviation(baseline_trainer.curve(init_state, seed), reference_curve)
    print(f"baseline {baseline}: loss {reference_curve[0]:.4f} -> {reference_curve[-1]:.4f}, run-to-run spread "
          f"{spread:.3g}")
    if not truth:
        return Gate(reference_curve, spread, config.loss_floor)
    truth_curve = Trainer(config, decoder.TRUTH, "eager", init_state, device).curve(init_state, seed)
    distances = {}
    for name in sdpa_backends(problem):
        curve = reference_curve if name == baseline else Trainer(config, name, "eager", init_state, device).curve(
            init_state, seed)
        distances[name] = agreement.max_deviation(curve, truth_curve)
    sdpa_dev = max(distances.values()) if distances else agreement.max_deviation(reference_curve, truth_curve)
    print("fp32-attention truth: loss {:.4f} -> {:.4f}; SDPA backends off it by {}".format(
        truth_curve[0], truth_curve[-1], ", ".join(f"{k} {v:.3g}" for k, v in distances.items()) or "(none run)"))
    return Gate(reference_curve, spread, config.loss_floor, truth_curve, sdpa_dev)


def pick_baseline(name: str | None, problem: Problem) -> str:
    if name is not None:
        reason = get(name).supports(problem)
        if reason:
            raise ConfigError(f"baseline={name} cannot run this model: {reason}")
        return name
    for candidate in BASELINE_CHOICES:
        if get(candidate).supports(problem) is None:
            return candidate
    raise ConfigError(f"no baseline of {BASELINE_CHOICES} runs this model")


class Trainer:
    """One (variant, mode): the model built from the shared init, compiled once, reused for agreement and timing."""

    def __init__(self, config, variant: str, mode: str, init_state: dict, device: str):
        self.config, self.mode, self.device = config, mode, device
        self.model = decoder.Decoder(config, variant).to(device)
        self.model.load_state_dict(init_state)
        self.run = (self.model if mode == "eager" else _ThroughOperator(self.model) if mode == EAGER_OPERATOR else
                    torch.compile(self.model, fullgraph=True, mode=mode))
        self.mark_step = mode == "reduce-overhead"

    def curve(self, init_state: dict, seed: int) -> list[float]:
        return agreement.loss_curve(self.run, self.model, init_state, self.config, seed, self.device, self.mark_step)

    def step_fn(self, seed: int):
        optimizer = agreement.new_optimizer(self.model, self.config, self.device)
        tokens, targets = decoder.batch_of(self.config, 0, seed, self.device)
        return lambda: agreement.train_step(self.run, self.model, optimizer, tokens, targets, self.config,
                                            self.mark_step)


class _ThroughOperator:
    """The eager model whose attention() calls go through the operator (variants.op.through_operator): the path
    torch.compile traces, run eagerly; its backward is the operator's too (recorded by the forward's dispatch)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, *args):
        from variants.op import through_operator
        with through_operator():
            return self.model(*args)


def time_steps(step, warmup: int, rep: int) -> list[float]:
    """[median, p20, p80] ms of one training step (CUDA events on a GPU, wall clock on the CPU)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(rep):
        if on_gpu():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            tic = time.perf_counter()
            step()
            times.append((time.perf_counter() - tic) * 1e3)
    ordered = torch.tensor(times, dtype=torch.float64)
    return [float(torch.quantile(ordered, q)) for q in (0.5, 0.2, 0.8)]


def attention_backward_kernels(variant: str, config, seed: int) -> set[str]:
    """The kernel names of the design's backward alone, one layer's shape (profiled on the GPU; PyTorch's generic
    elementwise kernels left out, since the rest of the step launches them too)."""
    from runners.point import measure, profile
    from variants.base import default_scale
    problem = problem_of(config)
    q, k, v, do = measure.make_inputs(_Shape(config), "cuda", seed)[:4]
    impl = get(variant)
    backward = impl.prepare(q, k, v, do, problem.causal, default_scale(config.head_dim),
                            impl.make_blocks(problem, None))
    kernels, _ = profile.kernel_breakdown(backward, calls=2)
    return {name for name in kernels if not name.startswith(profile.GENERIC_KERNELS) and "Memset" not in name}


class _Shape:
    """The fields measure.make_inputs reads of a sweep Point, for one layer's attention."""

    def __init__(self, config):
        self.batch, self.seq, self.seq_k, self.heads, self.kv_heads = (config.batch, config.seq, config.seq,
                                                                       config.heads, config.kv_heads)
        self.head_dim, self.dtype, self.layout, self.varlen = config.head_dim, config.dtype, "bnhd", None


def step_profile(step, bwd_kernels: set[str]) -> dict:
    """Per-kernel GPU time of a training step and the attention backward's share of it."""
    from runners.point import profile
    kernels, launches = profile.kernel_breakdown(step, calls=3)
    total = sum(kernels.values())
    attn_bwd = sum(ms for name, ms in kernels.items() if name in bwd_kernels)
    return {"kernel_ms": json.dumps({k: round(v, 5) for k, v in kernels.items()}), "kernel_ms_sum": total,
            "kernel_launches": launches / 3, "attn_bwd_ms": attn_bwd,
            "attn_bwd_share": attn_bwd / total if total else math.nan,
            "attn_bwd_kernels": ",".join(sorted(bwd_kernels))}


def measure_one(config, variant: str, mode: str, init_state: dict, gate: Gate, seed: int, device: str,
                timeout_s: float = 0.0) -> dict:
    """The measured columns of one row; never raises (a failure is a status and a one-line reason)."""
    from runners.point.measure import classify, one_line
    reason = get(variant).supports(problem_of(config))
    if reason is not None:
        return {"status": "unsupported", "correct": False, "reason": reason}
    try:
        with time_limit(timeout_s):
            return measure_trained(config, variant, mode, init_state, gate, seed, device)
    except PointTimeout as exc:
        return {"status": "timeout", "correct": False, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - one row per point, whatever the failure
        return {"status": classify(exc, from_variant=True), "correct": False, "reason": one_line(exc)}


def measure_trained(config, variant: str, mode: str, init_state: dict, gate: Gate, seed: int, device: str) -> dict:
    """measure_one's columns of a design that runs the model (may raise)."""
    trainer = Trainer(config, variant, mode, init_state, device)
    curve = trainer.curve(init_state, seed)
    judged = gate.judge(curve)
    ms, ms_p20, ms_p80 = time_steps(trainer.step_fn(seed), config.warmup, config.rep)
    row = {"status": "ok" if judged["correct"] else "wrong", **judged, "ms": ms, "ms_p20": ms_p20, "ms_p80": ms_p80,
           "loss_first": curve[0], "loss_last": curve[-1], "loss_curve_json": json.dumps([round(x, 6) for x in curve])}
    if on_gpu():
        row.update(step_profile(trainer.step_fn(seed), attention_backward_kernels(variant, config, seed)))
    else:
        row["profile_note"] = "CPU interpreter: no CUDA kernels, no per-kernel times"
    return row


def row_of(config, variant: str, mode: str, baseline: str, seed: int, sweep_id: str, index: int, measured: dict,
           environment: dict) -> dict:
    config_cols = {k: v for k, v in config.__dict__.items() if k != "name"}
    key = json.dumps({"bench_kind": BENCH_KIND, "model": config.name, **config_cols, "variant": variant,
                      "compile_mode": mode, "baseline": baseline, "seed": seed}, sort_keys=True)
    return {"sweep_id": sweep_id, "point_index": index, "config_key": key, "bench_kind": BENCH_KIND,
            "variant": variant, "compile_mode": mode, "compiled": mode not in EAGER_MODES, "model": config.name,
            **config_cols, "seq_k": config.seq, "layout": "bnhd", "seed": seed, "agreement_baseline": baseline,
            "agreement_steps": config.steps, "timing_meaningful": on_gpu(), **measured,
            **{k: v for k, v in environment.items() if not k.startswith("peak_tflops_")},
            "timestamp": env.utc_now()}


def main(argv: list[str] | None = None) -> int:
    try:
        runner, overrides = parse_args(sys.argv[1:] if argv is None else argv)
        config = model_config.load(runner["model"], overrides)
        problem = problem_of(config)
        if not on_gpu() and config.dtype == "bf16":
            raise ConfigError("dtype=bf16 needs a GPU (the interpreter's bf16 dots are not exact)")
        variants_ = variant_names(runner["variant"])
        modes = compile_modes(runner["compile"])
        baseline = pick_baseline(runner["baseline"], problem)
        truth = wants_truth(runner["truth"], config)
        timeout_s = point_timeout(runner["point_timeout"])
        seed = int(runner["seed"])
    except (ConfigError, ValueError) as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    device = problem.device
    sweep_id = runner["sweep_id"] or datetime.datetime.now().strftime("model_step_%Y%m%d_%H%M%S")
    environment = environment_columns()
    print(f"{config.label()}; agreement: {config.steps} steps against {baseline}"
          + ("" if on_gpu() else "; CPU interpreter: times are CPU wall clock, not GPU timings"))
    torch.manual_seed(seed)
    init_state = {k: v.clone() for k, v in decoder.Decoder(config, baseline).to(device).state_dict().items()}
    gate = make_gate(config, baseline, problem, init_state, seed, device, truth)
    directory = results.point_dir(runner["results_dir"], environment["gpu"], sweep_id)
    for index, (variant, mode) in enumerate((v, m) for v in variants_ for m in modes):
        torch._dynamo.reset()
        measured = measure_one(config, variant, mode, init_state, gate, seed, device, timeout_s)
        row = row_of(config, variant, mode, baseline, seed, sweep_id, index, measured, environment)
        key = results.resume_key(row["config_key"], environment["gpu_name"], environment["commit"],
                                 environment["diff_hash"])
        results.write_row(row, directory, index, key)
        print(progress(variant, mode, row))
    print(f"rows: {directory}")
    return 0


def environment_columns() -> dict:
    """runners.point.env's columns; without omegaconf (a GPU machine without Hydra) the GPU is named by its device name
    and has no peak numbers."""
    try:
        return env.environment({"name": "auto", "index": 0})
    except ImportError:
        name = torch.cuda.get_device_name(0) if on_gpu() else "cpu"
        return env.environment({"name": name, "index": 0})


def progress(variant: str, mode: str, row: dict) -> str:
    head = f"{variant:<16} {mode:<16}"
    if row["status"] not in ("ok", "wrong"):
        return f"{head} {row['status']}: {row['reason']}"
    share = row.get("attn_bwd_share")
    share_text = f", attention backward {share:.0%} of kernel time" if share is not None and share == share else ""
    text = (f"{head} {row['status']:<5} {row['ms']:9.3f} ms/step{share_text}; loss off baseline by "
            f"{row['loss_max_dev']:.3g} (tolerance {row['loss_tol']:.3g})")
    if row.get("loss_truth_dev") is not None:
        text += f", off the fp32 truth by {row['loss_truth_dev']:.3g} (tolerance {row['loss_truth_tol']:.3g})"
    return text

