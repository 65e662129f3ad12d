"""Hydra entry point of the tuner: an Optuna study over one variant's block fields for one shape.

    python -m runners.tune variant=two_pass head_dim=128 causal=true seq=4096 trials=80
    python -m runners.tune variant=two_pass head_dim=128 causal=true seq=4096 space=grid trials=16
    python -m runners.tune variant=two_pass trials=0 write_defaults=true     # winners -> block_defaults.yaml

Every trial is a runner point: `runners.sweep.run_point` measures it (accuracy gate first) and writes the
normal row, with `study` set, under <results_dir>/<gpu>/tune-<study>/. The sampler is Optuna's TPE with a
fixed seed; each searched field is one categorical parameter whose candidates come from the Blocks
declarations (variants/blocks.py `tunable`), or from the sweep=blocks grid (space=grid). A trial that is
not ok (wrong, resources, oom, compile_error, error, skipped, unsupported) is PRUNED with its status and reason.
A config that cannot run (a block rule, and on a GPU the compile check for its architecture:
runners/tuning/feasibility.py) is filtered before it is measured: no row, not one of `trials`; the samplers are told
it is PRUNED and asked again (at most MAX_REDRAWS draws in a row without a measurement). The study lives in its
rows: a restarted study re-adds them as trials (runners/tuning/trials.py) and measures only new configs. A study
that measured nothing (every trial skipped or unsupported, or every config filtered) exits 2 with one line.

Per-kernel decomposition (`decompose`): when the searched fields belong to independent kernels (Blocks fields
tagged `tunable(..., kernel=...)`, two_pass's dK/dV and dQ kernels), one TPE study per kernel is asked for its
fields, the union is measured once, and each study is told its own kernel's time from the row's kernel_ms
(untagged fields: one more study told the total ms); the last trial joins every group's best. Config keys:
conf/tune.yaml; docs/tuning.md.
"""
import copy
import dataclasses
import itertools
import math
import random
import sys
from pathlib import Path

from runners.point import env

env.use_interpreter_without_gpu()  # before anything imports `variants`

import hydra  # noqa: E402
import yaml  # noqa: E402
from omegaconf import DictConfig, OmegaConf, open_dict  # noqa: E402

from runners import sweep  # noqa: E402
from runners.point import measure, schema  # noqa: E402
from runners.tables import results  # noqa: E402
from runners.point.schema import ConfigError  # noqa: E402
from runners.tuning import feasibility  # noqa: E402
from runners.tuning.search import Search, field_groups, startup_trials  # noqa: E402

CONFIG_NAME = "tune"
SPACES = ("declared", "grid", "search")
MAX_DUPLICATES = 8  # consecutive re-proposals of known configs before a random unknown config is tried
MAX_REDRAWS = 64  # draws in a row that measure nothing (re-proposals, dead configs) before the study stops
NOT_MEASURED = ("skipped", "unsupported")  # row statuses with no measurement: a study of only these measured nothing


@dataclasses.dataclass
class StudyResult:
    name: str
    study: object  # optuna.Study of the measured configs, every field (joint: the sampler's own study)
    space: dict
    measured: int  # distinct configs with a row (restored ones included)
    restored: int
    best: dict | None  # the fastest ok row
    rows_dir: Path
    groups: dict = dataclasses.field(default_factory=dict)  # {group name: optuna.Study}; {JOINT: study} if joint
    combined: dict | None = None  # the joined best of the groups, when the last trial measured it
    filtered: dict = dataclasses.field(default_factory=dict)  # {kind: dead configs filtered before measuring}
    nothing_measured: str | None = None  # why the study measured nothing (main exits 2 with it), else None

    @property
    def decomposed(self) -> bool:
        return len(self.groups) > 1


# ---- the search space ---------------------------------------------------------------------------------

def grid_space(variant: str) -> dict:
    """{field: values} of conf/sweep_grid/blocks_<variant>.yaml (the sweep=blocks grid); a design without that file
    and with tunable fields: the grid derived from its Blocks dataclass (schema.derived_grid), as sweep=blocks."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = env.CONF_DIR / "sweep_grid" / f"blocks_{variant}.yaml"
    if not path.is_file() and schema.derived_grid(variant):
        return schema.derived_grid(variant)
    if not path.is_file():
        raise ConfigError("space", f"space=grid: no {path.relative_to(env.REPO)} for variant {variant!r}")
    params = (yaml.safe_load(path.read_text()) or {}).get("hydra", {}).get("sweeper", {}).get("params", {})
    space = {}
    for override in OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()]):
        name = override.key_or_group.removeprefix("blocks.")
        space[name] = tuple(override.sweep_iterator()) if override.is_sweep_override() else (override.value(),)
    return space


def search_space(cfg: DictConfig, blocks_cls, fixed: dict) -> dict:
    """{field: candidates} the study searches: by `space`, with `search` replacing candidates, minus the
    fields fixed in blocks.*. ConfigError when it is empty or names an unknown field."""
    known = [f.name for f in dataclasses.fields(blocks_cls)]
    given = OmegaConf.to_container(cfg.search, resolve=True) or {}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigError("search", f"unknown block field(s) {unknown}; known: {known}")
    if cfg.space == "declared":
        space = dict(blocks_cls.search_space())
    elif cfg.space == "grid":
        space = grid_space(cfg.variant.name)
    elif cfg.space == "search":
        space = {}
    else:
        raise ConfigError("space", f"must be one of {', '.join(SPACES)}, got {cfg.space!r}")
    for name, values in given.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(f"search.{name}", "needs at least one value")
        space[name] = values
    space = {k: tuple(dict.fromkeys(space[k])) for k in known if k in space and k not in fixed}
    if not space:
        raise ConfigError("space", f"nothing to search for variant {cfg.variant.name!r} (space={cfg.space}, "
                                   f"fixed: {sorted(fixed)})")
    return space


def space_size(space: dict) -> int:
    return math.prod(len(v) for v in space.values())


# ---- one trial ------------------------------------------------------------------------------------------

def study_name(point: schema.Point, space: str) -> str:
    heads = f"{point.heads}" if point.heads == point.kv_heads else f"{point.heads}-{point.kv_heads}"
    seq = f"{point.seq}" if point.seq == point.seq_k else f"{point.seq}x{point.seq_k}"
    layout = "" if point.layout == "bnhd" else f"-{point.layout}"
    return (f"{point.variant}-b{point.batch}-h{heads}-n{seq}-d{point.head_dim}-"
            f"{'causal' if point.causal else 'full'}-{point.dtype}{layout}-{space}")


def trial_config(cfg: DictConfig, params: dict) -> DictConfig:
    trial = copy.deepcopy(cfg)
    with open_dict(trial.blocks):
        for name, value in params.items():
            trial.blocks[name] = value
    return trial


def found_row(cfg: DictConfig, trial_cfg: DictConfig, before: int, environment: dict) -> dict | None:
    """The row resume found when run_point returned None (a config measured by another run)."""
    new = results.session_paths()[before:]  # results.find_done notes the row it found
    if new:
        return results.load(new[-1]).iloc[-1].to_dict()
    point = schema.check(trial_cfg, env.device_kind())
    config_key = point.config_key(measure.timer_name(cfg.bench, env.interpreting()))
    base = Path(cfg.results_dir) / environment["gpu"]
    df = results.load(base, strict=False) if base.is_dir() else None  # a bad file: skipped, named
    if df is None or df.empty:
        return None
    df = df[(df["config_key"] == config_key) & df["status"].isin(results.RESUME_STATUSES)]
    return None if df.empty else df.sort_values("timestamp").iloc[-1].to_dict()


def rule_checker(cfg: DictConfig):
    """params -> (checked point, None), or (None, the rule it breaks): the block rules of a trial's config."""
    def check(params: dict):
        try:
            return schema.check(trial_config(cfg, params), env.device_kind()), None
        except ConfigError as exc:
            return None, str(exc)
    return check


class TrialLines:
    """The `out` of run_point for one trial: the lines it prints while measuring (the CPU interpreter's estimate
    and its every-few-seconds line) pass on, one line late; its closing lines (the result, `row: <path>`) are held
    back, since the tuner prints the result itself, with the study's best (issue 45)."""

    def __init__(self, out):
        self.out, self.held = out, None

    def __call__(self, line: str) -> None:
        if line.startswith("row: "):
            return
        if self.held is not None:
            self.out(self.held)
        self.held = line


def run_trial(cfg, point, params, index, total, environment, gpu_index, out) -> tuple[dict | None, str]:
    """(row, result line) of one live config, measured by run_point (or its row found by resume): the line names
    the config and says its status and TFLOPS (ms in the CPU interpreter) or its reason."""
    trial_cfg = trial_config(cfg, params)
    prefix = f"[{index + 1}/{total}] {point.label()}"
    before = len(results.session_paths())
    row = sweep.run_point(trial_cfg, index, total, out=TrialLines(out), gpu_index=gpu_index)
    if row is None:
        row = found_row(cfg, trial_cfg, before, environment)
        if row is None:
            return None, f"{prefix}: recorded by another run, row not found"
        return row, sweep.progress(prefix, row) + " (recorded before)"
    return row, sweep.progress(prefix, row)


# ---- the study ------------------------------------------------------------------------------------------

def restore(rows_dir: Path, name: str, space: dict, environment: dict, out) -> list[tuple[dict, dict]]:
    """[(params, row)] of the study's rows measured on this GPU by this code (the resume of a study).
    Rows with a transient status (oom, error) are left out, so their configs may be measured again."""
    from runners.tuning import trials as T

    if not rows_dir.is_dir():
        return []
    rows = T.study_rows(results.load(rows_dir, strict=False), name)  # a bad file: skipped, named
    if rows.empty:
        return []
    same = ((rows["gpu_name"] == environment["gpu_name"]) & (rows["commit"] == environment["commit"])
            & (rows["diff_hash"].fillna("") == (environment["diff_hash"] or "")))
    kept, other = [], int((~same).sum())
    for row in rows[same].to_dict("records"):
        params = T.row_params(row, space)
        if params is None or row["status"] not in results.RESUME_STATUSES:
            other += 1
            continue
        kept.append((params, row))
    if other:
        out(f"study {name}: {other} row(s) not restored (other GPU or code, outside the space, or oom/error)")
    return kept


def _best_text(best: dict | None) -> str:
    if best is None:
        return "best: none yet"
    unit = "" if best.get("timing_meaningful", True) else " wall clock"
    return f"best {best['ms']:.4g} ms{unit} (trial {int(best['point_index']) + 1})"


def tune(cfg: DictConfig, out=print, gpu_index: int | None = None) -> StudyResult:
    """Runs (or resumes) the study of cfg's shape and variant until `trials` distinct configs have rows."""
    import optuna
    import variants

    from runners.tuning import trials as T

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not isinstance(cfg.trials, int) or cfg.trials < 0:
        raise ConfigError("trials", f"must be an integer >= 0, got {cfg.trials!r}")
    base = schema.check(cfg, env.device_kind())  # the shape, the user's fixed blocks, their defaults
    blocks_cls = variants.get(base.variant).Blocks
    space = search_space(cfg, blocks_cls, base.block_overrides)
    layout = field_groups(cfg, blocks_cls, space)
    name = cfg.study or study_name(base, cfg.space)
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.study, cfg.sweep_id = name, f"tune-{name}"
    if gpu_index is None:
        gpu_index = 0 if cfg.gpu.index == "auto" else int(cfg.gpu.index)
    environment = env.environment({**OmegaConf.to_container(cfg.gpu, resolve=True), "index": gpu_index})
    rows_dir = results.point_dir(cfg.results_dir, environment["gpu"], cfg.sweep_id)

    size = space_size(space)
    budget = min(int(cfg.trials), size)
    search = Search(cfg, name, space, layout, out)
    checker, about = feasibility.gpu_compile_checker(environment, base.variant)
    feasible = feasibility.Feasibility(rule_checker(cfg), checker, about, out)
    seen: dict[str, dict | None] = {}  # params key -> its row (None: recorded but not readable)
    best = None
    next_index = 0
    restored = restore(rows_dir, name, space, environment, out)
    out(f"study {name}: {len(space)} fields, {size} configs; {budget} trials "
        f"({len(restored)} restored from {rows_dir}); TPE seed {cfg.sampler_seed}, "
        f"{startup_trials(cfg)} random start; {search.describe()}; dead configs filtered: block rules, {about}")
    for params, row in restored:
        search.add(params, row)
        seen[T.params_key(params)] = row
        best = _faster(best, row)
        next_index = max(next_index, int(row["point_index"]) + 1)
    if cfg.warm_start and not restored:
        default = {k: v for k, v in base.blocks_dict.items() if k in space}
        if all(T.matching_candidate(v, space[k]) is not None for k, v in default.items()):
            search.enqueue({k: T.matching_candidate(v, space[k]) for k, v in default.items()})

    rng = random.Random(int(cfg.sampler_seed))
    duplicates = streak = redraws = 0
    combined, combined_due = None, search.decomposed
    dead: set[str] = set()  # params keys of the configs filtered so far
    stopped = ""
    while len(seen) < budget:
        if len(seen) + len(dead) >= size:
            stopped = f"every config of the space is measured or filtered ({len(seen)} measured)"
            break
        if redraws >= MAX_REDRAWS:
            stopped = (f"stopped after {MAX_REDRAWS} draws in a row measured nothing (re-proposals or filtered "
                       f"configs; {len(seen)} of {budget} trials measured)")
            break
        if combined_due and len(seen) == budget - 1:  # the last trial: every group's best joined
            combined_due = False
            combined = search.combined()
            if combined is not None and T.params_key(combined) not in seen.keys() | dead:
                out(f"study {name}: last trial = every group's best joined")
                search.enqueue(combined)
            else:
                combined = None  # already measured: the trial is spent as any other
        elif streak >= MAX_DUPLICATES:
            search.enqueue(_unmeasured(space, seen.keys() | dead, rng))
            streak = 0
        trials, params = search.ask()
        key = T.params_key(params)
        if key in seen:  # a measured config re-proposed: every group is told the recorded outcome, nothing measured
            search.tell(trials, seen[key], params, new=False)
            duplicates += 1
            streak += 1
            redraws += 1
            continue
        verdict = feasible.dead(params)  # cached: a dead config re-proposed costs no second check
        if verdict is not None:  # dead: no row, not a trial; the samplers learn it and are asked again
            search.tell_dead(trials, verdict)
            dead.add(key)
            if combined is not None and T.params_key(combined) == key:
                combined = None  # the groups' bests joined cannot run: the trial goes to another config
            streak += 1
            redraws += 1
            continue
        streak = redraws = 0
        index = next_index
        row, line = run_trial(cfg, feasible.point(params), params, index, budget, environment, gpu_index, out)
        next_index += 1
        seen[key] = row
        search.tell(trials, row, params, new=True)
        if row is None:  # resume said recorded but the row could not be read back: measure nothing more
            out(line)
            continue
        best = _faster(best, {**row, "point_index": index})
        out(f"{line} | {_best_text(best)}{search.progress()}")

    counts: dict[str, int] = {}
    for row in seen.values():
        if row is not None:
            counts[row["status"]] = counts.get(row["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    if stopped:
        out(f"study {name}: {stopped}")
    out(f"study {name}: {len(seen)} configs measured ({summary}); {duplicates} re-proposals not re-measured"
        + (f"; group bests{search.progress().replace(' |', ':', 1)}" if search.decomposed else ""))
    if feasible.summary():
        out(f"study {name}: {feasible.summary()}")
    if best is not None:
        out(f"study {name}: {_best_text(best)}: {best['blocks_json']}")
    out(f"rows: {rows_dir}")
    groups = {g.name: g.study for g in search.groups}
    return StudyResult(name, search.record, space, len(seen), len(restored), best, rows_dir, groups, combined,
                       feasible.filtered, _nothing_measured(name, seen, feasible))


def _nothing_measured(name: str, seen: dict, feasible) -> str | None:
    """The one line of a study none of whose configs was measured (every row skipped or unsupported, or no row
    at all: every config filtered), else None."""
    rows = [row for row in seen.values() if row is not None]
    if any(row["status"] not in NOT_MEASURED for row in rows):
        return None
    parts = []
    for status in NOT_MEASURED:
        mine = [row for row in rows if row["status"] == status]
        if mine:
            parts.append(f"{len(mine)} of {len(rows)} trials {status} ({mine[0]['reason']})")
    if feasible.summary():
        parts.append(feasible.summary())
    return f"study {name}: nothing measured: {'; '.join(parts) or 'no trial'} (exit status {sweep.EXIT_CONFIG})"


def _faster(best: dict | None, row: dict) -> dict | None:
    """The faster of the best ok row so far and `row` (by total ms)."""
    from runners.tuning import trials as T

    _, value = T.outcome(row)
    return row if value is not None and (best is None or value < best["ms"]) else best


def _unmeasured(space: dict, seen, rng: random.Random) -> dict:
    """A random config of the space not in `seen` (params keys: measured or filtered; the space is known not to be
    exhausted)."""
    from runners.tuning import trials as T

    names = list(space)
    if space_size(space) <= 4096:
        left = [dict(zip(names, combo)) for combo in itertools.product(*space.values())
                if T.params_key(dict(zip(names, combo))) not in seen]
        return rng.choice(left)
    while True:
        params = {k: rng.choice(space[k]) for k in names}
        if T.params_key(params) not in seen:
            return params


def defaults_rows_path(cfg: DictConfig, gpu_index: int | None) -> Path:
    if cfg.defaults_rows:
        return Path(cfg.defaults_rows)
    gpu_cfg = {**OmegaConf.to_container(cfg.gpu, resolve=True), "index": gpu_index or 0}
    return Path(cfg.results_dir) / env.environment(gpu_cfg)["gpu"]


def run(cfg: DictConfig, out=print, gpu_index: int | None = None) -> StudyResult | None:
    """The study (trials > 0), then write_defaults when asked."""
    from runners.tuning import block_rules

    result = tune(cfg, out, gpu_index) if cfg.trials > 0 else None
    if result is None and not cfg.write_defaults:
        out("trials=0 and write_defaults=false: nothing to do")
    if cfg.write_defaults:
        path = defaults_rows_path(cfg, gpu_index)
        if not path.exists():
            raise ConfigError("defaults_rows", f"no results at {path}")
        target = Path(cfg.defaults_file) if cfg.defaults_file else env.CONF_DIR / "block_defaults.yaml"
        block_rules.write_defaults(results.load(path), cfg.variant.name, target, out)
    return result


@hydra.main(version_base="1.3", config_path=str(env.CONF_DIR), config_name=CONFIG_NAME)
def main(cfg: DictConfig) -> None:
    try:
        with sweep.job_lease(cfg) as held:
            result = run(cfg, gpu_index=held.index)
        if result is not None and result.nothing_measured:
            print(result.nothing_measured, file=sys.stderr)
            sys.exit(sweep.EXIT_CONFIG)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(sweep.EXIT_CONFIG)
    except results.TableError as exc:  # write_defaults reading a file that is not a result table
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(sweep.EXIT_CONFIG)


def cli(argv: list[str] | None = None) -> None:
    """`python -m runners.tune ...`: a composition error is one line and exit 2, then Hydra's main."""
    from hydra import compose, initialize_config_dir

    argv = sys.argv[1:] if argv is None else list(argv)
    if not any(a.startswith("-") for a in argv):
        try:
            with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="tune"):
                sweep.prepare_choices(argv)  # plugins=[...] imported, an unknown variant= refused
                compose(CONFIG_NAME, argv)
        except ConfigError as exc:
            print(f"config error: {exc}", file=sys.stderr)
            sys.exit(sweep.EXIT_CONFIG)
        except Exception as exc:  # noqa: BLE001 - Hydra's own errors: typo'd key, wrong type, unknown option
            print(f"config error: {sweep.hydra_error_line(exc)}", file=sys.stderr)
            sys.exit(sweep.EXIT_CONFIG)
    sys.argv = [sys.argv[0], *argv]
    main()


if __name__ == "__main__":
    cli()
