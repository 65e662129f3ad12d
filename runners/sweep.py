"""Hydra entry point: one run measures one point, -m sweeps; one parquet row per point.

    python -m runners.sweep seq=4096 variant=two_pass
    python -m runners.sweep -m seq=1024,4096,16384 head_dim=64,128 causal=true,false variant=two_pass,atomic,fused
    python -m runners.sweep -m sweep=blocks variant=atomic

Before Hydra starts, `cli()` composes every point of the run (the multirun's too) and checks it: a bad
config is one line on stderr and exit code 2, before anything is written. A point that fails while
measuring becomes a row with its status; the multirun goes on.
"""
import difflib
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

from runners import usage

if __name__ == "__main__" and usage.asks_for_help(sys.argv[1:]):  # before the imports below: seconds on 2 cores
    usage.print_help()
    sys.exit(0)

from runners import phases  # noqa: E402
from runners.point import env  # noqa: E402

PRESTART_ENV = "FLASH_BWD_PRESTART"  # set by cli() for its job processes: the plugins of their isolated workers
phases.mark_once("import", module=__name__)
if not usage.CLI and __name__ != "__main__" and os.environ.get(PRESTART_ENV) is not None:
    # a job process of a launcher that runs jobs elsewhere (loky: hydra/launcher=local_gpus): its isolated worker
    # starts now and imports torch, Triton and the designs while this process imports them too (docs/scaling.md).
    # Taken out of the environment first: a spawned worker runs this module again (as __mp_main__) and must not
    # start one of its own.
    _plugins = json.loads(os.environ.pop(PRESTART_ENV))
    import multiprocessing as _mp

    from runners.isolation import isolate as _isolate

    # before env.use_interpreter_without_gpu() (torch): a node without a CUDA driver (a Slurm CPU node whose job
    # decides on the interpreter only then) starts no spawned worker here
    if _mp.current_process().name != "flash-bwd-worker" and (_isolate.driver_present()
                                                             or os.environ.get(_isolate.START_ENV) == "spawn"):
        _isolate.prestart_plugins(_plugins)

env.use_interpreter_without_gpu()  # before anything imports `variants`

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.experimental.callback import Callback  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from runners import lazy  # noqa: E402
from runners.isolation import isolate, lease  # noqa: E402
from runners.point import schema  # noqa: E402
from runners.point.schema import ConfigError  # noqa: E402
from runners.sweep_state import note_lost, run_state  # noqa: E402

# torch, Triton and the designs come with these: imported at their first use, after the config's keys are checked
cpu_cost, measure, varlen_inputs = (lazy.Module(f"runners.point.{name}") for name in ("cpu_cost", "measure",
                                                                                       "varlen_inputs"))
results = lazy.Module("runners.tables.results")
if not usage.CLI and __name__ != "__main__":  # a job process (loky, Slurm) or an importer; the command line
    # stores them once the keys are checked (preflight)
    schema.store_variant_configs()  # `variant=<name>` for every registered design, with or without its yaml
phases.mark_once("imported", module=__name__)

JOB_MODULE = "runners.sweep"  # what a job process imports for its task function (main): warmed by early job starts
CONFIG_DIR = str(env.CONF_DIR)  # ../conf from this file, as an absolute path (works however this module is run)
CONFIG_NAME = "config"
EXIT_CONFIG = 2
CPU_BANNER = ("CPU run (no GPU): Triton kernels run in the interpreter; times are CPU wall clock, NOT GPU timings. "
              "Points estimated over cpu_budget_s are recorded as skipped.")
EXIT_FAULTS = 3  # the run finished, but some point crashed or timed out (docs/fault_isolation.md)
EXIT_LOST = 4  # the run finished, but some point's row could not be written (not recorded)
_early_jobs = {"thread": None}  # hydra_plugins/flash_bwd_local.start_job_processes's thread (not in run_state: the
# job processes get run_state pickled with their task function)




def shown(path) -> str:
    """A path as a user would type it: relative to the current folder when under it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


def plot_command(folders, dtype: str | None) -> str:
    """`python -m plots.compare results=<the folder holding all of them> [dtype=...]`."""
    common = os.path.commonpath([str(Path(f).resolve()) for f in folders])
    extra = f" dtype={dtype}" if dtype and dtype != "bf16" else ""  # plots.compare draws bf16 by default
    return f"plot: python -m plots.compare results={shown(common)}{extra}"


def config_columns(point: schema.Point, cfg: DictConfig, timer: str) -> dict:
    cols = {"variant": point.variant, "batch": point.batch, "heads": point.heads, "kv_heads": point.kv_heads,
            "seq": point.seq, "seq_k": point.seq_k, "head_dim": point.head_dim, "causal": point.causal,
            "dtype": point.dtype, "layout": point.layout, "seed": int(cfg.seed)}
    cols.update(varlen_inputs.columns(point))  # varlen_dist, num_docs, mean_doc_len, max_doc_len, tokens_total
    cols.update(window_left=point.window_left, window_right=point.window_right, softcap=point.softcap,
                gate=point.gate, modifiers=point.problem("cpu").modifier_text)  # issue 24; '' = plain attention
    cols["forward"] = point.forward  # the forward asked for (issue 42); measure's forward_ran: the one that ran
    cols["timed"] = point.timed  # what the row times (issue 42): backward, forward or train (runners/point/timed.py)
    cols.update(head_dim_v=point.value_dim, sink=point.sink)  # issue 47 (in `modifiers` too: 'dv=128 sink')
    cols.update(point.blocks_dict)  # one column per block field, resolved
    cols["blocks_json"] = point.blocks_json
    cols["block_overrides_json"] = json.dumps(point.block_overrides, sort_keys=True)
    cols["study"] = cfg.get("study")  # runners.tune's study name; None for sweep rows
    cols.update(bench_warmup_ms=float(cfg.bench.warmup), bench_rep_ms=float(cfg.bench.rep),
                flush_l2=timer == "do_bench", cuda_graph=timer == "do_bench_cudagraph")  # as timed, not as asked
    return cols


def progress(prefix: str, row: dict) -> str:
    status = row["status"]
    if status == "ok":
        if row["timing_meaningful"]:
            pct = f", {row['pct_peak']:.0f}% of peak" if row["pct_peak"] == row["pct_peak"] else ""
            return f"{prefix}: {row['tflops']:.1f} TFLOPS ({row['ms']:.3f} ms{pct}) ok"
        return f"{prefix}: {row['ms']:.1f} ms wall clock (CPU interpreter, not a GPU timing) ok"
    if status == "wrong":
        return f"{prefix}: wrong ({row['reason']}); its {row['ms']:.3f} ms is not reported"
    if status == "skipped":
        return f"{prefix}: skipped: {row['reason']}"
    return f"{prefix}: {status} ({row['reason']})"


def run_point(cfg: DictConfig, index: int = 0, total: int | None = 1, out=print,
              gpu_index: int | None = None, rule_rows: bool = False) -> dict | None:
    """Check, resume-or-measure and record one point; the row written, or None when resume skipped it.
    `gpu_index`: the device leased for it (main() holds the lease), else cfg.gpu.index (auto: 0).
    Raises ConfigError for a bad config (before writing anything); never raises for a failing measurement.
    `rule_rows`: blocks that break a block rule are an `unsupported` row with the rule (a point of a grid), not a
    ConfigError. With cfg.isolate on, the measurement runs in a worker process (runners/isolation/isolate.py): a
    crash or hang of the point is a `crashed` / `timeout` row written here, by the parent."""
    broken_rule = None
    try:
        point = schema.check(cfg, env.device_kind())
    except schema.BlockRuleError as exc:
        if not rule_rows:
            raise
        point, broken_rule = exc.point, f"block rule: {exc}"
    timer = measure.timer_name(cfg.bench, env.interpreting())
    if gpu_index is None:
        gpu_index = 0 if cfg.gpu.index == lease.AUTO else int(cfg.gpu.index)
    environment = env.environment({**OmegaConf.to_container(cfg.gpu, resolve=True), "index": gpu_index})
    config_key = point.config_key(timer)
    key = results.resume_key(config_key, environment["gpu_name"], environment["commit"], environment["diff_hash"])
    prefix = f"[{index + 1}/{total or '?'}] {point.label()}"
    if cfg.resume:
        done = results.find_done(cfg.results_dir, environment["gpu"], key)
        if done is not None:
            path, old = done
            out(f"{prefix}: skipped, already recorded ({old['status']}) in {path}")
            return None
    estimate = cpu_cost.estimate_point(point, cfg.bench) if env.interpreting() and not broken_rule else None
    refused = None if estimate is None else cpu_cost.refusal(point, estimate, float(cfg.cpu_budget_s))
    if broken_rule:
        refused = ("unsupported", broken_rule)
    if refused is not None:  # over the CPU budget, or bf16 in the interpreter: a row, at once
        measured = measure.not_measured(point, timer, *refused)
    else:
        phases.mark("point", index=index)
        with cpu_cost.progress(estimate, prefix, out):
            measured = isolate.call(cfg, measure.measure, point, cfg.bench, timer=timer, gpu_index=gpu_index,
                                    seed=int(cfg.seed), peak_tflops=environment.get(f"peak_tflops_{point.dtype}"))
    if estimate is not None:
        measured["cpu_estimate_s"] = estimate + cpu_cost.start_cost()
    row = {"sweep_id": str(cfg.sweep_id), "point_index": index, "config_key": config_key,
           **config_columns(point, cfg, timer), **measured,
           "peak_tflops": environment.get(f"peak_tflops_{point.dtype}"),
           **{k: v for k, v in environment.items() if not k.startswith("peak_tflops_")},
           "timestamp": env.utc_now()}
    directory = results.point_dir(cfg.results_dir, environment["gpu"], str(cfg.sweep_id))
    path = results.write_row(row, directory, index, key)
    phases.mark("row", index=index)
    out(progress(prefix, row))
    if total == 1:
        out(f"row: {path}")
    return row


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name=CONFIG_NAME)
def main(cfg: DictConfig) -> dict:
    """One job; returns what became of its point, for a launcher whose jobs run in other processes (loky workers,
    Slurm; runners/isolation/job_returns.py): {"written": [path], "found": [path]} (the row, new or already on
    disk), or {"lost": reason}; both with "pid", the process that ran the job."""
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    index = int(hydra_cfg.job.num) if multirun else 0
    total = run_state["total"] if multirun else 1
    before = len(results.session_paths()), len(results.session_found())
    phases.mark_once("job", index=index)
    if isolate.enabled(cfg):
        isolate.prestart(cfg)  # the worker's imports overlap the lease, the check and the row's key (no-op when live)
    else:
        isolate.drop_unused()  # one started for this process before its config was known
    try:
        with job_lease(cfg, hydra_cfg) as held:  # before any CUDA work; released when the job ends
            phases.mark_once("lease", gpu=held.index)
            row = run_point(cfg, index, total, gpu_index=held.index, rule_rows=multirun and (total or 0) > 1)
        if row is not None and row["status"] in measure.FAULT_STATUSES:
            run_state["faults"] += 1
        if not multirun and row is not None and row["status"] == "ok" and row.get("correct"):
            gpu_dir = Path(str(cfg.results_dir)) / row["gpu"]
            print(plot_command([gpu_dir], row["dtype"]) + "   # every row of this GPU")
    except ConfigError as exc:
        if not multirun:
            print(f"config error: {exc}", file=sys.stderr)
            sys.exit(EXIT_CONFIG)
        return note_lost(f"[{index + 1}/{total or '?'}] config error, point skipped: {exc}", f"config error: {exc}")
    except Exception as exc:  # noqa: BLE001 - a runner failure (e.g. writing the row) must not end a multirun
        # ... nor be a traceback: one line here, counted, and cli() exits EXIT_LOST with the count
        results.claims.release_all()  # the point's claim (runners/tables/claims.py): another sweep may measure it
        reason = measure.one_line(exc)
        return note_lost(f"[{index + 1}/{total or '?'}] runner error, point not recorded: {reason}", reason)
    found = [str(p) for p in results.session_found()[before[1]:]]
    written = [str(p) for p in results.session_paths()[before[0]:] if str(p) not in found]
    return {"written": written, "found": found, "pid": os.getpid()}


def job_lease(cfg: DictConfig, hydra_cfg=None) -> lease.Lease:
    """This job's GPU lease (runners/isolation/lease.py): gpu.index's device, or the first free GPU when
    gpu.index=auto or the launcher runs several jobs of this node at once (joblib's n_jobs != 1,
    hydra/launcher=local_gpus). Waits while the GPU is taken. None needed on the CPU interpreter."""
    if env.interpreting():
        return lease.no_lease()
    launcher = hydra_cfg.launcher if hydra_cfg is not None else {}
    concurrent = launcher.get("n_jobs", 1) != 1
    try:
        return lease.gpu_lease(lease.AUTO if concurrent else cfg.gpu.index)
    except ValueError as exc:  # an index past the visible devices
        raise ConfigError("gpu.index", str(exc), str(exc)) from None


class SummaryCallback(Callback):
    """At the start of a multirun: fix sweep_id for every job; at the end: the pivot table of the rows."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        # Resolving ${now:...} here caches it in the master config, and Hydra copies that cache into every
        # job's config: all jobs share one sweep_id (also when hydra.sweep.dir does not mention it).
        print(f"sweep {config.sweep_id}")
        phases.mark("launch")
        results.reset_session()

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        try:
            sweep_dirs = sorted(Path(config.results_dir).glob(f"*/{config.sweep_id}"))
            files = [f for d in sweep_dirs for f in sorted(d.glob("*.parquet"))] + results.session_paths()
            files = list(dict.fromkeys(Path(f).resolve() for f in files))  # + rows resume found elsewhere
            df = results.load(files, strict=False) if files else results.pd.DataFrame()
            print(f"\nsweep {config.sweep_id}: {len(df)} rows{_counts(df, files)}")
            print(results.summary_table(df))
            faults = results.fault_lines(df)
            run_state["faults"] = len(faults)  # also counts jobs run by other processes (parallel launchers)
            for line in faults:
                print(line)
            for d in sweep_dirs:
                print(f"rows: {d}")
            drawable = df[(df["status"] == "ok") & df["correct"].astype(bool)] if "correct" in df else df[:0]
            if len(drawable):
                print(plot_command({Path(f).parent for f in files},
                                              drawable["dtype"].value_counts().index[0]))
        except Exception as exc:  # noqa: BLE001 - a summary never fails the sweep
            print(f"summary failed: {measure.one_line(exc)}", file=sys.stderr)


def _counts(df, files) -> str:
    """' (4 ok)', or after a rerun ' (3 already on disk, 1 new; 4 ok)'."""
    statuses = results.status_counts(df)
    found = {Path(p).resolve() for p in results.session_found()}
    on_disk = sum(Path(f).resolve() in found for f in files)
    if not on_disk:
        return statuses
    return f" ({on_disk} already on disk, {max(len(df) - on_disk, 0)} new{'; ' + statuses[2:-1] if statuses else ''})"


# ---- preflight: compose and check every point before Hydra writes anything --------------------------

def split_argv(argv: list[str]) -> tuple[list[str], bool, bool]:
    """(overrides, multirun, passthrough): any flag but -m/--multirun (--help, --cfg, ...) goes to Hydra as is."""
    overrides, multirun, passthrough = [], False, False
    for arg in argv:
        if arg in ("-m", "--multirun"):
            multirun = True
        elif arg.startswith("-"):
            passthrough = True
        else:
            overrides.append(arg)
    return overrides, multirun, passthrough


def hydra_error_line(exc: BaseException) -> str:
    """Hydra/OmegaConf's multi-line error (and its cause) as one line."""
    parts = [str(exc)]
    if exc.__cause__ is not None and str(exc.__cause__) not in parts[0]:
        parts.append(str(exc.__cause__))
    skip = ("full_key:", "object_type=", "reference_type=", "Set the environment variable HYDRA_FULL_ERROR")
    lines = [ln.strip() for p in parts for ln in p.split("Config search path:")[0].splitlines()]
    text = " ".join(ln for ln in lines if ln and not ln.startswith(skip))
    return text or type(exc).__name__


def expand_jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override list of every job Hydra would launch (the basic sweeper's cartesian product of the
    command line and the preset's hydra.sweeper.params); [overrides] for a single run."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    if not multirun:
        for o in parsed:
            if o.is_sweep_override():
                raise ConfigError(o.key_or_group, f"{o.input_line!r} sweeps several values: add -m (multirun)")
        return [overrides]
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    try:
        base = compose(CONFIG_NAME, fixed, return_hydra_config=True)
    except Exception as exc:  # noqa: BLE001 - Hydra's composition error, reported as one line
        compose_job(fixed, {})  # an unknown key among them: our own one line (ConfigError), not Hydra's hint
        raise _PreflightError(hydra_error_line(exc) + _blocks_hint(fixed, exc)) from None
    launcher = base.hydra.launcher
    run_state["jobs_elsewhere"] = (not str(launcher.get("_target_", "")).endswith("BasicLauncher")
                                   and launcher.get("n_jobs", None) != 1)  # loky processes, Slurm tasks
    if str(launcher.get("_target_", "")).endswith("FlashBwdLocalLauncher") and run_state["jobs_elsewhere"]:
        from hydra_plugins import flash_bwd_local  # local_gpus: its job processes start now, during the checks

        _early_jobs["thread"] = flash_bwd_local.start_job_processes(
            launcher, [str(m) for m in (base.get("plugins") or [])], isolate.enabled(base), JOB_MODULE)
    sweeper = base.hydra.sweeper
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return [fixed]  # other sweepers choose points themselves: check the fixed part only
    params = OmegaConf.to_container(sweeper.params, resolve=True) if sweeper.get("params") else {}
    lines = [f"{k}={v}" for k, v in params.items()] + list(overrides)
    return sweep_product(parser.parse_overrides(lines))


def sweep_product(parsed: list) -> list[list[str]]:
    """The jobs of Hydra's basic sweeper from parsed overrides (hydra.core.override_parser): per key the last
    override wins, in the order keys first appear; a discrete sweep (a,b,c / choice / range) gives one value per job;
    the cartesian product over keys. Other sweeps (interval) are the basic sweeper's error too."""
    import itertools

    from hydra.errors import HydraException

    per_key: dict[str, list[str]] = {}
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            if not o.is_discrete_sweep():
                raise HydraException(f"BasicSweeper does not support sweep type : {o.value_type.name}")
            per_key[key] = [f"{key}={val}" for val in o.sweep_string_iterator()]
        else:
            per_key[key] = [f"{key}={o.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*per_key.values())]


def check_keys_early(overrides: list[str]) -> bool:
    """An unknown key (a typo) is a ConfigError before torch, Triton and the designs are imported: the config of the
    conf/ folder alone is composed with the override's group choices, a swept key with its first value. Where that
    cannot decide (a plugin, a group swept over several options, a choice that only the registry knows), it leaves
    the check to the full preflight. True when the early composition succeeded, False when it left the check."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - a malformed override: Hydra's own one-line error comes at composition
        return False
    groups = {p.name for p in env.CONF_DIR.iterdir() if p.is_dir()}
    choices, values = [], []
    for o in parsed:
        key = o.key_or_group.split("@")[0]
        if key == "plugins" or (key in groups and o.is_sweep_override()):
            return False
        if key in groups or key.startswith("hydra"):
            choices.append(o.input_line)
        else:
            values.append(o.input_line if not o.is_sweep_override() else _first_value(o))
    try:
        compose_job([*choices, *values], {})
    except ConfigError:
        raise
    except Exception:  # noqa: BLE001 - e.g. variant=<a registered design without a yaml>: the full check decides
        return False
    return True


def _first_value(o) -> str:
    """A sweep override (`seq=1024,4096`, `seq=range(1,3)`) as the override of its first value (`seq=1024`); a
    sweep it cannot expand stays `key=null` (the early check then leaves typed keys to the full preflight)."""
    name = o.input_line.split("=", 1)[0]  # the key with its +/++ prefix, as given
    try:
        first = next(iter(o.sweep_string_iterator()))
    except Exception:  # noqa: BLE001 - glob() over a value, an empty sweep: nothing to take
        return f"{name}=null"
    return f"{name}={first}"


def prepare_choices(overrides: list[str]) -> None:
    """Before composing: imports the modules a `plugins=[...]` override names (their designs register and get their
    derived configs, so `variant=<their name>` composes), then refuses a `variant=` choice that names no registered
    design: one ConfigError listing the registered names."""
    import variants
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - a malformed override: Hydra's own one-line error comes at composition
        return
    for o in parsed:
        if o.key_or_group == "plugins" and not o.is_delete() and not o.is_sweep_override():
            value = o.value()
            schema.import_plugins(value if isinstance(value, list) else [value])
            schema.store_variant_configs()
    for o in parsed:
        if o.key_or_group != "variant" or o.is_delete() or (
                o.is_sweep_override() and not isinstance(o.value(), ChoiceSweep)):
            continue  # variant=glob(*) and the like: Hydra lists the options itself
        for name in (o.sweep_string_iterator() if o.is_sweep_override() else [o.value()]):
            if isinstance(name, str) and name not in variants.names():
                raise ConfigError("variant", variants.registry.unknown_text(name))


def preflight(overrides: list[str], multirun: bool) -> int:
    """Composes and checks every job; the number of jobs. Raises ConfigError or _PreflightError (one line)."""
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="sweep"):
        check_keys_early(overrides)
        schema.store_variant_configs()  # imports the designs (torch, Triton): after the keys are known good
        prepare_choices(overrides)
        jobs = expand_jobs(overrides, multirun)
        if not run_state.get("jobs_elsewhere"):  # GPU: this process's worker imports while the points are checked
            isolate.prestart_plugins(())  # (cli keeps it if the jobs want it)
        composed: dict = {}
        isolation: set = set()  # (isolated, plugins) of every job: what their workers need (cli's prestart)
        checked_dirs: set = set()
        broken: list[str] = []
        for job in jobs:
            try:
                cfg = compose_job(list(job), composed)
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 - Hydra's composition error, reported as one line
                raise _PreflightError(hydra_error_line(exc) + _blocks_hint(list(job), exc)) from None
            isolation.add((isolate.enabled(cfg), tuple(str(m) for m in (cfg.get("plugins") or []))))
            try:
                if cfg.results_dir not in checked_dirs:
                    check_results_dir(cfg.results_dir)
                    checked_dirs.add(cfg.results_dir)
                schema.check(cfg, env.device_kind())
            except schema.BlockRuleError as exc:
                if not (multirun and len(jobs) > 1):
                    raise
                broken.append(str(exc))  # a grid point like any other: its row says which rule it broke
            except ConfigError as exc:
                where = f" (point {' '.join(job)})" if multirun and len(jobs) > 1 else ""
                raise exc.with_suffix(where) from None
    (isolated, plugins), = isolation if len(isolation) == 1 else ((False, ()),)
    run_state["worker_plugins"] = plugins if isolated else None  # one worker fits every job: prestart it
    if broken:
        print(f"{len(broken)} of {len(jobs)} points break a block rule (e.g. {broken[0]}): each is an `unsupported` "
              "row with its rule", flush=True)
    return len(jobs)


def check_results_dir(value) -> None:
    """results_dir must be a folder that exists or can be created, and that this process can write to: a
    ConfigError (one line) otherwise, before anything is measured. Writes nothing (a probe file is removed)."""
    text = "" if value is None else str(value)
    if not text.strip():
        raise ConfigError("results_dir", "is empty; give the folder for the rows, e.g. results_dir=results")
    path = Path(text).expanduser()
    probe = path
    while not probe.exists():  # the nearest folder that exists: the rows' folders are created under it
        if probe.is_symlink():
            raise ConfigError("results_dir", f"{text!r}: {str(probe)!r} is a broken link")
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        what = "is a file, not a folder" if probe == path else f"cannot be created: {str(probe)!r} is a file"
        raise ConfigError("results_dir", f"{text!r} {what}")
    try:
        fd, name = tempfile.mkstemp(prefix=".write-check-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        where = "" if probe == path else f" (its folder {str(probe)!r} is not writable)"
        raise ConfigError("results_dir", f"{text!r} is not writable{where}: {exc.strerror or exc}") from None


def _config_keys(cfg) -> list[str]:
    """Every dotted key of a composed config (intermediate nodes too), Hydra's own node left out."""
    keys: list[str] = []

    def walk(node, prefix: str) -> None:
        for key, value in node.items():
            if prefix == "" and key == "hydra":
                continue
            path = f"{prefix}{key}"
            keys.append(path)
            if isinstance(value, dict):
                walk(value, path + ".")

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return keys


def check_keys(values, cfg) -> None:
    """Refuse a value override whose key the config does not have (a typo: Hydra's own error suggests
    `+key=...`, which would run with the key ignored), and any `+key=...` / `++key=...` of a non-Hydra key:
    one ConfigError naming the closest valid key (and, under `blocks.`, the variant's block fields)."""
    keys = None
    for o in values:
        key = o.key_or_group
        if key.startswith(("hydra.", "hydra/")) or key == "hydra":
            continue
        if keys is None:
            keys = _config_keys(cfg)
        add = o.is_add() or o.is_force_add()
        if key in keys:
            if add:
                value = o.input_line.lstrip("+").split("=", 1)[-1]
                raise ConfigError(key, "", f"{o.input_line!r}: {key!r} is a config key; set it without '+': "
                                           f"{key}={value}")
            continue
        text = f"unknown key {key!r}"
        if key.startswith("blocks."):
            fields = [k[len("blocks."):] for k in keys if k.startswith("blocks.")]
            name = OmegaConf.select(cfg, "variant.name", default="?")
            text += f" (variant {name} has block fields: {', '.join(fields) or 'none'})"
            candidates = [k for k in keys if k.startswith("blocks.")]
        else:
            candidates = [k for k in keys if not k.startswith("blocks.")]
        close = [k for k in candidates if k.lower() == key.lower()][:1]  # blocks.block_n: BLOCK_N, not the nearest text
        if not close:
            scored = [(difflib.SequenceMatcher(None, key, k).ratio(), -i, k) for i, k in enumerate(candidates)]
            close = [max(scored)[2]] if scored and max(scored)[0] >= 0.6 else []  # ties: the first in config order
        if not close:  # e.g. 'seqlen' vs 'seq': compare the leading characters too
            close = [k for k in candidates if k.split(".")[-1] and key.split(".")[-1].startswith(k.split(".")[-1])]
            close = sorted(close, key=len, reverse=True)[:1]
        if close:
            text += f"; did you mean {close[0]!r}?"
        elif not key.startswith("blocks."):
            text += "; see `python -m runners.sweep --cfg job` for the keys"
        raise ConfigError(key, "", text)


def compose_job(job: list[str], composed: dict) -> DictConfig:
    """compose(config, job), composing once per set of config-group choices and applying the job's value
    overrides to a copy (Hydra's own order: groups build the config, then values are applied)."""
    import copy

    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser

    groups = {p.name for p in env.CONF_DIR.iterdir() if p.is_dir()}
    parsed = OverridesParser.create().parse_overrides(job)

    def is_group(o) -> bool:
        key = o.key_or_group.split("@")[0]
        return key in groups or key.startswith("hydra/")

    choice = tuple(o.input_line for o in parsed if is_group(o))
    values = [o for o in parsed if not is_group(o) and not o.key_or_group.startswith("hydra.")]
    if choice not in composed:
        composed[choice] = compose(CONFIG_NAME, list(choice))
    check_keys(values, composed[choice])
    cfg = copy.deepcopy(composed[choice])
    apply_values(values, cfg)
    return cfg


def apply_values(values: list, cfg: DictConfig) -> None:
    """Value overrides (parsed, no config groups) applied to a composed config as Hydra's compose applies them,
    through OmegaConf's public API: `~key[=value]` deletes, `+key=value` adds a key that is not there,
    `++key=value` adds or sets, `key=value` sets an existing key."""
    from hydra.errors import ConfigCompositionException
    from omegaconf import open_dict
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    for o in values:
        if o.package is not None:
            raise ConfigCompositionException(f"Override {o.input_line} looks like a config group override, but config "
                                             f"group '{o.key_or_group}' does not exist.")
        key, value = o.key_or_group, o.value()
        try:
            if o.is_delete():
                current = OmegaConf.select(cfg, key, throw_on_missing=False)
                if current is None:
                    raise ConfigCompositionException(f"Could not delete from config. '{key}' does not exist.")
                if value is not None and value != current:
                    raise ConfigCompositionException(f"Could not delete from config. The value of '{key}' is "
                                                     f"{current} and not {value}.")
                parent, _, leaf = key.rpartition(".")
                with open_dict(cfg):
                    del (OmegaConf.select(cfg, parent) if parent else cfg)[leaf]
            elif o.is_add():
                if OmegaConf.select(cfg, key, throw_on_missing=False) is not None and \
                        not isinstance(value, (dict, list)):
                    raise ConfigCompositionException(f"Could not append to config. An item is already at '{key}'.")
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            elif o.is_force_add():
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            else:
                try:
                    OmegaConf.update(cfg, key, value, merge=True)
                except (ConfigAttributeError, ConfigKeyError) as ex:
                    raise ConfigCompositionException(f"Could not override '{key}'.\nTo append to your config use "
                                                     f"+{o.input_line}") from ex
        except OmegaConfBaseException as ex:
            raise ConfigCompositionException(f"Error merging override {o.input_line}") from ex


class _PreflightError(Exception):
    pass


def _blocks_hint(job: list[str], exc: Exception) -> str:
    """For an unknown `blocks.X` override: the block fields the chosen variant has."""
    if "blocks." not in str(exc) or "not in struct" not in hydra_error_line(exc):
        return ""
    from hydra import compose
    import variants
    try:
        name = compose(CONFIG_NAME, [o for o in job if not o.startswith(("blocks.", "+blocks."))]).variant.name
        fields = list(variants.get(name).Blocks.__dataclass_fields__)
    except Exception:  # noqa: BLE001 - no hint then
        return ""
    return f" (variant {name} has block fields: {', '.join(fields) or 'none'})"


def lost_line(lost: list[str], total: int | None) -> str:
    """'2 of 6 points not recorded: <the commonest reason> (and 1 other reason)'."""
    counts = Counter(lost).most_common()
    reason, _ = counts[0]
    more = f" (and {len(counts) - 1} other reason(s))" if len(counts) > 1 else ""
    of = max(total or 0, len(lost))
    return f"{len(lost)} of {of} point{'s' if of != 1 else ''} not recorded: {reason}{more} (exit status {EXIT_LOST})"


def cli(argv: list[str] | None = None) -> None:
    """`python -m runners.sweep ...`: preflight (exit 2 on a bad config), then Hydra's main."""
    argv = sys.argv[1:] if argv is None else list(argv)
    phases.mark("cli")
    overrides, multirun, passthrough = split_argv(argv)
    if usage.asks_for_help(argv):
        usage.print_help()
        sys.exit(0)
    run_state.update(jobs_elsewhere=False, worker_plugins=None)
    _early_jobs["thread"] = None
    if passthrough:  # --cfg, --hydra-help, ...: Hydra composes, so every design's config must be there
        schema.store_variant_configs()
    else:
        try:
            run_state["total"] = preflight(overrides, multirun)
        except ConfigError as exc:
            print(f"config error: {exc}", file=sys.stderr)
            sys.exit(EXIT_CONFIG)
        except Exception as exc:  # noqa: BLE001 - Hydra's own errors: typo'd key, wrong type, unknown option
            print(f"config error: {hydra_error_line(exc)}", file=sys.stderr)
            sys.exit(EXIT_CONFIG)
        phases.mark("preflight", jobs=run_state["total"])
        if env.interpreting():  # after the config check: a config error is one line, with no banner before it
            print(CPU_BANNER, flush=True)
    plugins = run_state["worker_plugins"]
    if passthrough or plugins is None or run_state["jobs_elsewhere"] or isolate.worker_plugins() != plugins:
        isolate.shutdown()  # this process measures nothing isolated with it; main() starts the right one
    if plugins is not None and run_state["jobs_elsewhere"]:
        os.environ[PRESTART_ENV] = json.dumps(list(plugins))  # job processes prestart theirs as they start
    if _early_jobs["thread"] is not None:  # the job processes started during the preflight: ready, or nearly
        _early_jobs["thread"].join()
    sys.argv = [sys.argv[0], *argv]
    run_state["faults"] = 0
    run_state["lost"] = []
    try:
        main()
    finally:
        os.environ.pop(PRESTART_ENV, None)
    phases.mark("done")
    lost = run_state["lost"]
    if lost:
        print(lost_line(lost, run_state["total"]), file=sys.stderr)
        sys.exit(EXIT_LOST)
    if run_state["faults"]:
        print(f"{run_state['faults']} point(s) crashed or timed out (rows recorded; exit status {EXIT_FAULTS})",
              file=sys.stderr)
        sys.exit(EXIT_FAULTS)


if __name__ == "__main__":
    # run from the module `runners.sweep`, not from `__main__`: the run's state (run_state) and its task
    # function are then the ones the callback and the Slurm launcher (hydra_plugins/flash_bwd_slurm) import
    usage.CLI = True
    from runners.sweep import cli as _cli

    _cli()
