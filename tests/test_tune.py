"""The Optuna tuner on the CPU interpreter: trials are runner rows, pruned trials keep their reason, resume
measures only new configs, write_defaults turns the winner into a block_defaults rule; plots.study draws it.
Per-kernel decomposition: synthetic measurements (measure.measure replaced, the rest of the runner real)."""
import dataclasses
import itertools
import json
import random
import shutil
import subprocess
import sys

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from optuna.trial import TrialState

from runners import tune  # runners.* set TRITON_INTERPRET first
from runners.tuning import block_rules, trials
from runners.point import env, measure, profile
from runners.tables import results
import variants
from runners.point.schema import ConfigError
from variants.block_defaults import default_block_fields
from variants.blocks import AtomicBlocks, FusedBlocks, TwoPassBlocks
from variants.problem import Problem

pytestmark = pytest.mark.skipif(not env.interpreting(), reason="tuner tests are for the CPU interpreter")
TINY = ["variant=two_pass", "seq=40", "head_dim=16", "batch=1", "heads=1", "dtype=fp32", "bench.cpu_warmup=0",
        "bench.cpu_rep=1", "space=search", "+search={BLOCK_M1:[16,32],BLOCK_N2:[16,32]}"]  # 4 configs


def cfg_for(tmp_path, *overrides, base=TINY):
    """isolate=false: tests replace measure.measure by local functions, which a worker process cannot take."""
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        return compose("tune", [*base, f"results_dir={tmp_path / 'results'}", "isolate=false", *overrides])


def study_table(result):
    return results.load(result.rows_dir)


def test_four_trial_study_rows_pruned_trials_and_written_defaults(tmp_path, monkeypatch):
    """2 ok, 1 wrong (dq corrupted), 1 invalid (a combination rule): the three that run are rows with `study`, the
    wrong one a PRUNED trial with its reason; the invalid one is filtered (no row, not a trial, told to the sampler
    as PRUNED `filtered`); the winner becomes the `any` rule for D <= 16."""
    impl = variants.get("two_pass")
    real_backward = impl.run_backward

    def corrupted(*args, blocks, **kwargs):
        dq, dk, dv = real_backward(*args, blocks=blocks, **kwargs)
        return (dq * 2 if (blocks.BLOCK_M1, blocks.BLOCK_N2) == (16, 32) else dq), dk, dv

    def rule(self):
        if (self.BLOCK_M1, self.BLOCK_N2) == (32, 32):
            raise ValueError("BLOCK_N2=32: test rule, not with BLOCK_M1=32")

    monkeypatch.setattr(impl, "run_backward", corrupted)
    monkeypatch.setattr(TwoPassBlocks, "check_rules", rule)
    lines = []
    result = tune.tune(cfg_for(tmp_path, "trials=4"), out=lines.append)

    df = study_table(result)
    assert result.measured == 3 and result.restored == 0 and len(df) == 3
    assert set(df["study"]) == {result.name} and df["config_key"].nunique() == 3
    by_config = {(r.BLOCK_M1, r.BLOCK_N2): r for r in df.itertuples()}
    assert set(by_config) == {(16, 16), (16, 32), (32, 16)}  # (32, 32) breaks the rule: filtered, no row
    assert by_config[16, 32].status == "wrong" and by_config[16, 32].ms > 0  # measured, not a result
    assert result.filtered == {"block rule": 1} and result.nothing_measured is None
    assert any("every config of the space is measured or filtered" in ln for ln in lines)
    assert any("1 config filtered before measuring, not trials (1 block rule)" in ln for ln in lines)
    ok = df[df["status"] == "ok"]
    assert len(ok) == 2 and ok["correct"].all()

    trials = result.study.get_trials(deepcopy=False)  # the record: the measured configs
    pruned = {t.user_attrs["status"]: t for t in trials if t.state == TrialState.PRUNED}
    assert set(pruned) == {"wrong"} and pruned["wrong"].params == {"BLOCK_M1": 16, "BLOCK_N2": 32}
    for group in result.groups.values():  # every sampler was told the invalid config is PRUNED, with the rule
        told = [t for t in group.get_trials() if t.user_attrs.get("status") == "filtered"]
        assert told and all(t.state == TrialState.PRUNED and "test rule" in t.user_attrs["reason"] for t in told)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert {t.value for t in complete} == set(ok["ms"])  # re-proposals carry a recorded value, never a new one
    assert result.best["ms"] == ok["ms"].min() and result.study.best_value == ok["ms"].min()
    progress = [ln for ln in lines if ln.startswith("[")]
    assert len(progress) == 3 and all("best" in ln for ln in progress)  # one line per measured trial
    # BLOCK_M1 and BLOCK_N2 belong to two kernels: decomposed, told the total ms (no kernel_ms on the CPU)
    assert result.decomposed and sum("without per-kernel times" in ln for ln in lines) == 1

    # write_defaults: the winner becomes a rule of `any` (the CPU interpreter's table) in a copy of the table
    table_path = tmp_path / "block_defaults.yaml"
    shutil.copy(env.CONF_DIR / "block_defaults.yaml", table_path)
    before = yaml.safe_load(table_path.read_text())
    printed = []
    tune.run(cfg_for(tmp_path, "trials=0", "write_defaults=true", f"defaults_file={table_path}"), out=printed.append)
    after = yaml.safe_load(table_path.read_text())
    winner = json.loads(result.best["blocks_json"])
    problem = Problem(1, 40, 40, 1, 1, 16, False, torch.float32, "cpu")
    assert TwoPassBlocks(**default_block_fields("two_pass", problem, after)).as_dict() == winner
    assert after["9.0"] == before["9.0"]  # only the architecture of the rows changes
    for head_dim, causal in ((64, False), (16, True), (128, True)):  # shapes the rule does not cover
        other = Problem(1, 40, 40, 1, 1, head_dim, causal, torch.float32, "cpu")
        assert default_block_fields("two_pass", other, after) == default_block_fields("two_pass", other, before)
    for name in ("atomic", "fused"):
        assert after["any"][name] == before["any"][name]
    diff = "\n".join(printed)
    assert "+    - when: {head_dim_max: 16, causal: false}" in diff and "(written)" in diff

    from plots import study as plot_study
    paths, table = plot_study.draw(results.load(result.rows_dir), tmp_path / "plots")
    assert [p.name for p in paths] == [f"study_{plot_study.T.slug(result.name)}.png"] and table is None


def test_a_resumed_study_measures_only_new_configs(tmp_path, monkeypatch):
    measured = []
    real_measure = measure.measure

    def counting(point, *args, **kwargs):
        measured.append(json.dumps({k: point.blocks_dict[k] for k in ("BLOCK_M1", "BLOCK_N2")}))
        return real_measure(point, *args, **kwargs)

    monkeypatch.setattr(measure, "measure", counting)
    first = tune.tune(cfg_for(tmp_path, "trials=2", "decompose=false"), out=lambda _: None)
    assert first.measured == 2 and len(measured) == 2 and not first.decomposed
    lines = []
    second = tune.tune(cfg_for(tmp_path, "trials=4", "decompose=false"), out=lines.append)
    assert second.restored == 2 and second.measured == 4
    assert len(measured) == 4 and len(set(measured)) == 4  # the first two were not measured again
    df = study_table(second)
    assert len(df) == 4 and df["config_key"].nunique() == 4 and set(df["study"]) == {second.name}
    assert "2 restored" in lines[0]
    assert len(second.study.get_trials(states=(TrialState.COMPLETE,))) >= 4


def test_search_space_comes_from_the_block_declarations(tmp_path):
    shape = TINY[:-2]  # no space=search
    cfg = cfg_for(tmp_path, "blocks.prescale=true", base=shape)
    space = tune.search_space(cfg, TwoPassBlocks, {"prescale": True})
    assert space == {k: v for k, v in TwoPassBlocks.search_space().items() if k != "prescale"}
    assert space["longest_first"] == (False, True) and space["BLOCK_M1"] == (16, 32, 64, 128)
    assert "deterministic" not in AtomicBlocks.search_space()  # a mode, not searched
    grid = tune.search_space(cfg_for(tmp_path, "space=grid", base=shape), TwoPassBlocks, {})
    assert grid == {"BLOCK_M1": (32, 64), "BLOCK_N1": (64, 128), "num_warps1": (4, 8), "BLOCK_M2": (64, 128),
                    "BLOCK_N2": (32, 64), "num_warps2": (4, 8)} and tune.space_size(grid) == 64
    with pytest.raises(ConfigError, match="search: unknown block field"):
        tune.search_space(cfg_for(tmp_path, "+search.BLOCK_Q=[1]", base=shape), TwoPassBlocks, {})
    with pytest.raises(ConfigError, match="space: must be one of"):
        tune.search_space(cfg_for(tmp_path, "space=everything"), TwoPassBlocks, {})


@pytest.mark.parametrize("blocks_cls", [TwoPassBlocks, AtomicBlocks, FusedBlocks])
def test_every_declared_candidate_passes_its_field_rule(blocks_cls, monkeypatch):
    """A candidate may break a combination rule (check_rules: an invalid trial) but never its own field's rule."""
    monkeypatch.setattr(blocks_cls, "check_rules", lambda self: None)
    for name, values in blocks_cls.search_space().items():
        for value in values:
            dataclasses.replace(blocks_cls(), **{name: value}).validate()


def test_rules_replace_the_exact_rule_or_go_before_the_serving_one(tmp_path):
    table_path = tmp_path / "block_defaults.yaml"
    shutil.copy(env.CONF_DIR / "block_defaults.yaml", table_path)
    before_text = table_path.read_text()
    base = TwoPassBlocks().as_dict()

    def row(head_dim, causal, ms, **blocks):
        fields = {**base, **blocks}
        return {"study": "s", "variant": "two_pass", "status": "ok", "correct": True, "compute_capability": "9.0",
                "head_dim": head_dim, "causal": causal, "dtype": "bf16", "seq": 4096, "ms": ms, "point_index": 0,
                "timestamp": str(ms), "config_key": f"{head_dim}{causal}{sorted(fields.items())}",
                "blocks_json": json.dumps(fields), **fields}

    import pandas as pd
    df = pd.DataFrame([row(128, True, 2.0, BLOCK_M1=64, BLOCK_N1=128, num_warps1=8, num_stages1=3),
                       row(128, True, 3.0, BLOCK_M1=16), row(96, False, 1.0, prescale=True)])
    block_rules.write_defaults(df, "two_pass", table_path, out=lambda _: None)
    after = yaml.safe_load(table_path.read_text())
    rules = after["9.0"]["two_pass"]
    whens = [r["when"] for r in rules]
    assert whens.index({"head_dim_max": 96, "causal": False}) == whens.index({"head_dim_max": 128, "causal": False}) - 1
    assert rules[whens.index({"head_dim_max": 128, "causal": True})]["blocks"]["BLOCK_N1"] == 128
    assert rules[whens.index({"head_dim_max": 96, "causal": False})]["blocks"]["prescale"] is True
    assert len(rules) == len(yaml.safe_load(before_text)["9.0"]["two_pass"]) + 1
    text = table_path.read_text()
    assert text.splitlines()[:10] == before_text.splitlines()[:10]  # the header comments are kept
    assert "any: *hopper" in text  # `any` still follows the Hopper table

    # a winner at a length a `seq_min` rule serves goes into that rule; the shorter lengths keep theirs
    long_seq = dict(row(128, True, 1.0, BLOCK_M1=16, BLOCK_N1=32), seq=16384)
    block_rules.write_defaults(pd.DataFrame([long_seq]), "two_pass", table_path, out=lambda _: None)
    rules = yaml.safe_load(table_path.read_text())["9.0"]["two_pass"]
    by_when = {json.dumps(r["when"], sort_keys=True): r["blocks"] for r in rules}
    assert by_when[json.dumps({"causal": True, "head_dim_max": 128, "seq_min": 8192}, sort_keys=True)]["BLOCK_N1"] == 32
    assert by_when[json.dumps({"causal": True, "head_dim_max": 128}, sort_keys=True)]["BLOCK_N1"] == 128
    assert len(rules) == len(yaml.safe_load(before_text)["9.0"]["two_pass"]) + 1


def test_bad_tuner_config_is_one_line_and_exit_2(tmp_path):
    for args, expect in ((["trialz=3"], "trialz"), (["space=everything"], "space: must be one of"),
                         (["variant=fused", "decompose=true"], "decompose: true needs")):
        proc = subprocess.run([sys.executable, "-m", "runners.tune", *args, f"results_dir={tmp_path}"],
                              cwd=env.REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and expect in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# ---- per-kernel decomposition: synthetic, separable measurements over the two_pass grid (64 configs) ----------
SHAPE = TINY[:-2]  # the tiny two_pass shape, no space=search
GRID_STUDY = [*SHAPE, "space=grid", "trials=16", "warm_start=false"]  # 25% of the 64-config grid


def separable_tables(seed=1) -> dict:  # seed 1: the joint TPE misses its optimum in 16
    """{kernel: (its grid fields, {their values: ms})}: distinct times per kernel config, so the sum has one
    optimum; the fields and values come from the grid file and the Blocks kernel tags."""
    space, kernels = tune.grid_space("two_pass"), TwoPassBlocks.field_kernels()
    rng, tables = random.Random(seed), {}
    for kernel in dict.fromkeys(kernels[f] for f in space):
        fields = [f for f in space if kernels[f] == kernel]
        combos = list(itertools.product(*(space[f] for f in fields)))
        times = [0.5 + 0.07 * i for i in range(len(combos))]
        rng.shuffle(times)
        tables[kernel] = (fields, dict(zip(combos, times)))
    return tables


def optimum(tables) -> dict:
    return {f: v for fields, table in tables.values() for f, v in zip(fields, min(table, key=table.get))}


def synthetic(monkeypatch, tables, kernel_ms=True, wrong=lambda blocks: False) -> list[dict]:
    """Replaces measure.measure by the tables' times (ms = the kernels + 0.05 ms delta + 0.02 ms gaps);
    returns the list of measured block dicts."""
    measured = []

    def fake(point, bench, *, timer, **_):
        blocks = point.blocks_dict
        measured.append(blocks)
        times = {k: table[tuple(blocks[f] for f in fields)] for k, (fields, table) in tables.items()}
        times["_delta_kernel"] = 0.05
        bad = wrong(blocks)
        return {**measure.EMPTY, **profile.EMPTY, "ms": sum(times.values()) + 0.02, "tflops": 1.0,
                "status": "wrong" if bad else "ok", "correct": not bad, "reason": "dq: test" if bad else "",
                "timing_meaningful": True, "timer": timer, "kernel_ms": json.dumps(times) if kernel_ms else None}

    monkeypatch.setattr(measure, "measure", fake)
    return measured


def test_decomposed_study_finds_the_separable_optimum_in_a_quarter_of_the_grid(tmp_path, monkeypatch):
    tables = separable_tables()
    measured = synthetic(monkeypatch, tables)
    lines = []
    result = tune.tune(cfg_for(tmp_path, *GRID_STUDY, base=[]), out=lines.append)
    assert result.decomposed and set(result.groups) == {"_dkdv_kernel", "_dq_kernel"}
    for kernel, (fields, _) in tables.items():  # each group's study searched its kernel's fields only
        assert all(set(t.params) == set(fields) for t in result.groups[kernel].get_trials())
    assert len(measured) == result.measured == 16
    assert len({json.dumps(b, sort_keys=True) for b in measured}) == 16  # no config measured twice
    best = json.loads(result.best["blocks_json"])
    assert {k: best[k] for k in result.space} == optimum(tables)
    df = study_table(result)
    assert len(df) == 16 and set(df["study"]) == {result.name}
    last = df.sort_values("point_index").iloc[-1]
    if result.combined is not None:  # the last trial measured the groups' bests joined
        assert {k: last[k] for k in result.space} == result.combined
    assert any("last trial = every group's best joined" in ln for ln in lines) == (result.combined is not None)
    progress = [ln for ln in lines if ln.startswith("[")]
    assert len(progress) == 16 and all(" | dkdv " in ln and ", dq " in ln for ln in progress)
    assert not any("without per-kernel times" in ln for ln in lines)
    # every group's objective is its kernel's time, not the total
    dkdv_fields, dkdv_table = tables["_dkdv_kernel"]
    done = result.groups["_dkdv_kernel"].get_trials(states=(TrialState.COMPLETE,))
    assert {t.value for t in done} <= set(dkdv_table.values())


@pytest.mark.parametrize("decompose, groups", [("false", {"joint"}), ("auto", {"_dkdv_kernel", "_dq_kernel"}),
                                               ("true", {"_dkdv_kernel", "_dq_kernel", "shared"})])
def test_decompose_setting_picks_the_groups(tmp_path, monkeypatch, decompose, groups):
    """false: today's joint study (it may miss the optimum); auto: one study per kernel; true with an untagged
    field searched: the kernels plus a shared group."""
    synthetic(monkeypatch, separable_tables())
    extra = ["+search.prescale=[false,true]"] if decompose == "true" else []
    result = tune.tune(cfg_for(tmp_path, *GRID_STUDY, "trials=6", f"decompose={decompose}", *extra, base=[]),
                       out=lambda _: None)
    assert set(result.groups) == groups and result.measured == 6
    assert result.decomposed == (decompose != "false")
    if decompose == "false":
        assert result.study is result.groups["joint"] and result.combined is None
    else:
        assert len(result.study.get_trials()) == 6  # the record: one trial per measured config
    if decompose == "true":
        assert set(result.groups["shared"].get_trials()[0].params) == {"prescale"}


def test_the_last_trial_joins_every_groups_best_also_after_a_resume(tmp_path, monkeypatch):
    """Separable times: the groups' bests joined beat every config measured before it."""
    synthetic(monkeypatch, separable_tables())
    fresh = tune.tune(cfg_for(tmp_path / "fresh", *GRID_STUDY, "trials=5", base=[]), out=lambda _: None)
    tune.tune(cfg_for(tmp_path / "resumed", *GRID_STUDY, "trials=3", base=[]), out=lambda _: None)
    resumed = tune.tune(cfg_for(tmp_path / "resumed", *GRID_STUDY, "trials=5", base=[]), out=lambda _: None)
    assert resumed.restored == 3
    for result in (fresh, resumed):
        df = study_table(result).sort_values("point_index")
        last = df.iloc[-1]
        assert result.combined is not None and {k: last[k] for k in result.space} == result.combined
        assert result.best["ms"] == last["ms"] == df["ms"].min() and len(df) == 5


def test_warm_start_enqueues_the_default_in_every_group(tmp_path, monkeypatch):
    from runners.point import schema

    measured = synthetic(monkeypatch, separable_tables())
    cfg = cfg_for(tmp_path, *GRID_STUDY, "trials=3", "warm_start=true", base=[])
    result = tune.tune(cfg, out=lambda _: None)
    default = {k: v for k, v in schema.check(cfg, env.device_kind()).blocks_dict.items() if k in result.space}
    assert len(default) == len(result.space)  # the shape's default lies in the grid
    assert {k: measured[0][k] for k in result.space} == default
    for group in result.groups.values():
        first = group.get_trials()[0].params
        assert first == {k: default[k] for k in first}


def test_a_resumed_decomposed_study_measures_no_config_twice(tmp_path, monkeypatch):
    tables = separable_tables()
    measured = synthetic(monkeypatch, tables)
    full = tune.tune(cfg_for(tmp_path / "full", *GRID_STUDY, base=[]), out=lambda _: None)
    measured.clear()
    first = tune.tune(cfg_for(tmp_path / "resumed", *GRID_STUDY, "trials=6", base=[]), out=lambda _: None)
    lines = []
    second = tune.tune(cfg_for(tmp_path / "resumed", *GRID_STUDY, base=[]), out=lines.append)
    assert first.measured == 6 and second.restored == 6 and second.measured == 16
    assert len(measured) == 16 and len({json.dumps(b, sort_keys=True) for b in measured}) == 16
    for group in second.groups.values():  # every group rebuilt from the rows, then asked for the new trials
        assert len(group.get_trials()) >= 16
    assert second.best["blocks_json"] == full.best["blocks_json"]
    assert second.combined is None or any("last trial" in ln for ln in lines)


def test_rows_without_kernel_times_tell_every_group_the_total_ms(tmp_path, monkeypatch):
    synthetic(monkeypatch, separable_tables(), kernel_ms=False)
    lines = []
    result = tune.tune(cfg_for(tmp_path, *GRID_STUDY, "trials=5", base=[]), out=lines.append)
    assert sum("without per-kernel times" in ln for ln in lines) == 1  # said once
    totals = set(study_table(result)["ms"])
    for group in result.groups.values():
        assert {t.value for t in group.get_trials(states=(TrialState.COMPLETE,))} <= totals
    for unreadable in (None, "", float("nan"), "not json", '{"_dq_kernel": "x"}', '{"_dkdv_kernel": 1.0}'):
        assert trials.kernel_value({"kernel_ms": unreadable}, "_dq_kernel") is None


def test_wrong_rows_are_pruned_in_every_group(tmp_path, monkeypatch):
    synthetic(monkeypatch, separable_tables(), wrong=lambda blocks: blocks["num_warps1"] == 8)
    result = tune.tune(cfg_for(tmp_path, *GRID_STUDY, "trials=8", base=[]), out=lambda _: None)
    df = study_table(result)
    wrong = int((df["status"] == "wrong").sum())
    assert 0 < wrong < 8
    for study in (*result.groups.values(), result.study):
        attrs = [t for t in study.get_trials() if t.user_attrs.get("status") == "wrong"]
        assert len(attrs) == wrong and all(t.state == TrialState.PRUNED for t in attrs)
    assert all(t.value is None for g in result.groups.values() for t in g.get_trials(states=(TrialState.PRUNED,)))


def test_kernel_tags_name_the_two_pass_kernels_and_single_kernel_variants_have_none(tmp_path):
    import kernels.dkdv_dq as two_pass  # the dK/dV and dQ kernels that two_pass launches

    tags = TwoPassBlocks.field_kernels()
    assert {k for k in tags.values() if k} == {"_dkdv_kernel", "_dq_kernel"}
    assert all(hasattr(two_pass, kernel) for kernel in set(tags.values()) - {None})
    assert tags["prescale"] is None and tags["longest_first"] is None
    for blocks_cls in (FusedBlocks, AtomicBlocks):
        assert not any(blocks_cls.field_kernels().values())
    fused = cfg_for(tmp_path, "variant=fused", "decompose=true", base=SHAPE)
    with pytest.raises(ConfigError, match="decompose: true needs"):
        tune.field_groups(fused, FusedBlocks, FusedBlocks.search_space())
    with pytest.raises(ConfigError, match="decompose: must be auto, true or false"):
        tune.field_groups(cfg_for(tmp_path, "decompose=maybe", base=SHAPE), TwoPassBlocks, {"BLOCK_M1": (16,)})


# ---- dead configs are filtered before a trial is spent (issue 43) -------------------------------------------------
def fake_compile_check(monkeypatch, dead_when) -> list[dict]:
    """Replaces the GPU's compile check (off in the CPU interpreter) by `dead_when(blocks)`: a config it names is
    out of shared memory in _dq_kernel. Returns the block dicts it was asked about."""
    from runners.tuning import feasibility

    asked = []

    def check(point):
        asked.append(point.blocks_dict)
        if dead_when(point.blocks_dict):
            return feasibility.Dead("shared memory on sm90", "_dq_kernel: OutOfResources: shared memory (test)",
                                    ("_dq_kernel",))
        return None

    monkeypatch.setattr(feasibility, "gpu_compile_checker", lambda environment, variant: (check, "test check"))
    return asked


def test_dead_configs_are_filtered_and_every_trial_is_a_measured_config(tmp_path, monkeypatch):
    """Issue 43's study: half the grid cannot compile (num_warps2=8 out of shared memory, said by the compile check)
    and some configs break a block rule; 16 trials measure 16 live configs, none dead, each dead config checked once."""
    measured = synthetic(monkeypatch, separable_tables())
    asked = fake_compile_check(monkeypatch, lambda blocks: blocks["num_warps2"] == 8)

    def rule(self):
        if (self.BLOCK_M1, self.num_warps1) == (32, 8):
            raise ValueError("test rule: BLOCK_M1=32 with 8 warps")

    monkeypatch.setattr(TwoPassBlocks, "check_rules", rule)
    lines = []
    result = tune.tune(cfg_for(tmp_path, *GRID_STUDY, base=[]), out=lines.append)
    assert len(measured) == result.measured == 16 and len(study_table(result)) == 16  # 16 trials, 16 rows
    assert not any(b["num_warps2"] == 8 or (b["BLOCK_M1"], b["num_warps1"]) == (32, 8) for b in measured)
    assert set(result.filtered) == {"shared memory on sm90", "block rule"}
    keys = [json.dumps(b, sort_keys=True) for b in asked]
    assert len(keys) == len(set(keys))  # cached: no config compile-checked twice
    assert sum(result.filtered.values()) == sum(b["num_warps2"] == 8 for b in asked) + result.filtered["block rule"]
    summary = [ln for ln in lines if "filtered before measuring, not trials" in ln]
    assert len(summary) == 1 and "shared memory on sm90" in summary[0] and "block rule" in summary[0]
    assert "dead configs filtered: block rules, test check" in lines[0]
    # the compile check named _dq_kernel: the dQ sampler learns it (PRUNED), the dK/dV one is not told a failure
    for kernel, state in (("_dq_kernel", TrialState.PRUNED), ("_dkdv_kernel", TrialState.FAIL)):
        told = [t for t in result.groups[kernel].get_trials() if "shared memory" in t.user_attrs.get("reason", "")]
        assert told and all(t.state == state and t.user_attrs["status"] == "filtered" for t in told)


def test_a_study_of_dead_configs_stops_after_a_bounded_number_of_draws(tmp_path, monkeypatch):
    measured = synthetic(monkeypatch, separable_tables())
    asked = fake_compile_check(monkeypatch, lambda blocks: True)
    lines = []
    result = tune.tune(cfg_for(tmp_path, *GRID_STUDY, base=[]), out=lines.append)
    assert measured == [] and result.measured == 0 and 0 < len(asked) <= tune.MAX_REDRAWS
    assert any(f"stopped after {tune.MAX_REDRAWS} draws in a row measured nothing" in ln for ln in lines)
    assert result.nothing_measured and "nothing measured" in result.nothing_measured
    assert f"{len(asked)} configs filtered before measuring" in result.nothing_measured


def test_the_compile_check_is_off_in_the_cpu_interpreter(tmp_path):
    from runners.tuning import feasibility

    checker, about = feasibility.gpu_compile_checker(env.environment({"index": 0}), "ws")
    assert checker is None and about == "compile check off (CPU interpreter)"


def test_the_compile_check_finds_a_ws_config_out_of_shared_memory(tmp_path):
    """The real check, in a fresh process (the interpreter off): ws D128 causal bf16 for sm90, the default tiles fit,
    BLOCK_M=128 needs ~355 KB of shared memory; the study's cache checks a config once."""
    code = """
import json, time, types
from runners.compile.arch_limits import ARCHS
from runners.tuning import feasibility
def point(**blocks):
    import variants
    from runners.compile import resources
    b, _, _ = resources.capture_launches("ws", 128, "bf16", True, 16, 16, blocks)
    return types.SimpleNamespace(variant="ws", head_dim=128, dtype="bf16", causal=True, heads=16, kv_heads=16,
                                 blocks_dict=b.as_dict(), window_left=-1, softcap=0.0, gate=False)
calls = []
def check(p):
    calls.append(p.blocks_dict)
    return feasibility.compile_verdict(p, ARCHS["sm90"])
points = {"default": point(), "big": point(BLOCK_M=128)}
f = feasibility.Feasibility(lambda params: (points[params["c"]], None), check, "compile check for sm90")
out = {}
for name in ("default", "big", "big"):
    start = time.perf_counter()
    dead = f.dead({"c": name})
    out[name] = [None if dead is None else [dead.kind, dead.reason, list(dead.kernels)], time.perf_counter() - start]
print(json.dumps({"out": out, "calls": len(calls), "summary": f.summary()}))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=env.REPO, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "TRITON_INTERPRET": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["out"]["default"][0] is None
    kind, reason, kernels = got["out"]["big"][0]
    assert kind == "shared memory on sm90" and kernels == ["_ws_backward_kernel"] and "Hardware limit: 232448" in reason
    assert got["calls"] == 2 and got["summary"] == "1 config filtered before measuring, not trials (1 shared memory on sm90)"


# ---- every trial's result is printed; a study that measured nothing exits 2 (issue 45) -----------------------------
def test_every_trial_prints_its_result_also_after_a_running_line(tmp_path, monkeypatch):
    """Points the CPU interpreter runs for a while print `running ...` first (cpu_cost.progress); the tuner's line of
    each trial is still its result, with the best so far; the running line passes on too."""
    import functools

    from runners.point import cpu_cost

    monkeypatch.setattr(cpu_cost, "progress", functools.partial(cpu_cost.progress, after_s=0.0))
    lines = []
    tune.tune(cfg_for(tmp_path, "trials=3", "decompose=false"), out=lines.append)
    results_lines = [ln for ln in lines if ln.startswith("[") and "| best" in ln]
    assert len(results_lines) == 3
    assert all("wall clock (CPU interpreter, not a GPU timing) ok" in ln and "running" not in ln for ln in results_lines)
    assert sum("running in the CPU interpreter" in ln for ln in lines) == 3


def test_the_readme_study_on_a_cpu_exits_2_with_one_line(tmp_path):
    """README's tune command on a CPU: every trial is skipped (hours in the interpreter); each trial still prints its
    result line, and the study exits 2 with one line on stderr saying why."""
    proc = subprocess.run([sys.executable, "-m", "runners.tune", "variant=two_pass", "head_dim=128", "causal=true",
                           "seq=4096", "trials=2", f"results_dir={tmp_path}"],
                          cwd=env.REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    err = [ln for ln in proc.stderr.strip().splitlines() if "nothing measured" in ln]
    assert len(err) == 1 and "2 of 2 trials skipped" in err[0] and "in the CPU interpreter" in err[0]
    assert "(exit status 2)" in err[0]
    assert sum(ln.startswith("[") and ": skipped: " in ln for ln in proc.stdout.splitlines()) == 2
