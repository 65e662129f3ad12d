"""A new design is two files, and a design can live outside the repo (issue 23, items 2 to 4; docs/interface.md).

The two-file design is docs/interface.md's own example, copied into an empty folder outside the package tree and
named in $FLASH_BWD_PLUGINS: the real commands sweep it, tune it, plot it, report it and run its correctness matrix,
each in a subprocess (this process's registry stays the repo's). The entry-point design is examples/external_design,
installed as pip would (its dist-info's entry_points.txt, taken from its pyproject.toml, on PYTHONPATH) and run by
`variant=external_example`. In-process: the configs the registry derives equal the yaml files they replace, a
design without yaml files composes (its variant config and its sweep=blocks grid), a bad name is one line."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from runners import sweep, tune  # runners.* set TRITON_INTERPRET before `import variants`
from runners.point import env, schema
import variants
from runners.point.schema import ConfigError
from variants import TritonVariant
from variants.blocks import Blocks, tunable
from variants.registry import ENTRY_POINT_GROUP, PLUGINS_ENV, _VARIANTS, register_variant

pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runs the runner on the CPU interpreter")
REPO = env.REPO
EXAMPLE = REPO / "examples" / "external_design"
TINY = ["batch=1", "heads=2", "head_dim=32", "dtype=fp16", "causal=true", "bench.cpu_warmup=0",
        "bench.cpu_rep=1"]


def doc_files() -> dict:
    """{file name: source} of the python blocks of docs/interface.md that start with `# <name>.py:`."""
    text = (REPO / "docs" / "interface.md").read_text()
    found = {}
    for body in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        match = re.match(r"# (\w+\.py):", body)
        if match:
            found[match.group(1)] = body
    return found


def run(args, env_extra, timeout=300, **kw):
    environment = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=environment, capture_output=True, text=True,
                          timeout=timeout, **kw)


def ok(proc) -> str:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


# ---- a design from two files outside the repo ---------------------------------------------------------------

PLOTS_AND_REPORT = textwrap.dedent('''
    import json, sys
    import pandas as pd
    from plots import common as C, compare, report
    from runners import tables as T
    rows, out = sys.argv[1], sys.argv[2]
    seen = []
    real_save = C.save
    def spy(fig, out, stem, svg):
        seen.append([t.get_text() for ax in fig.axes for t in (ax.get_legend().get_texts() if ax.get_legend() else [])]
                    + [t.get_text() for t in (fig.legends[0].get_texts() if fig.legends else [])])
        return real_save(fig, out, stem, svg)
    C.save = spy
    assert compare.main([f"results={rows}", f"out={out}/compare", "dtype=fp16"]) == 0
    assert report.main([f"results={rows}", f"out={out}/report"]) == 0
    df = T.load(rows)
    # the same rows as a GPU would write them (timings meaningful): the report ranks the design
    gpu = df.assign(timing_meaningful=True, gpu_name="FAKE-GPU", gpu="fake-gpu", tflops=1.0)
    gpu.to_parquet(f"{out}/gpu_rows.parquet")
    assert report.main([f"results={out}/gpu_rows.parquet", f"out={out}/report_gpu"]) == 0
    print(json.dumps({"legends": seen, "is_triton": T.is_triton("my_design"), "order": list(T.VARIANT_ORDER),
                      "fields": list(T.BLOCK_FIELDS), "variants": sorted(set(df["variant"]))}))
''')


@pytest.fixture(scope="module")
def two_file_design(tmp_path_factory):
    """docs/interface.md's two files in an empty folder, and the environment that names the design."""
    folder = tmp_path_factory.mktemp("my_designs")
    files = doc_files()
    assert set(files) == {"my_design_kernels.py", "my_design.py"}, "docs/interface.md must show exactly two files"
    for name, body in files.items():
        (folder / name).write_text(body)
    assert not (REPO / "conf" / "variant" / "my_design.yaml").exists()
    assert not (REPO / "conf" / "sweep_grid" / "blocks_my_design.yaml").exists()
    return folder, {"PYTHONPATH": str(folder), PLUGINS_ENV: "my_design", "PYTHONDONTWRITEBYTECODE": "1"}


def test_two_file_design_is_swept_tuned_plotted_reported_and_tested(two_file_design, tmp_path):
    folder, extra = two_file_design
    rows = tmp_path / "results"
    # runners.sweep: the grid derived from its tunable fields (2 x 2), one ok row each
    out = ok(run(["-m", "runners.sweep", "-m", "sweep=blocks", "variant=my_design", "seq=40", *TINY, f"results_dir={rows}",
                  "sweep_id=blocks", f"hydra.sweep.dir={tmp_path / 'multirun'}"], extra))
    assert "sweep blocks: 4 rows (4 ok)" in out
    df = pd.read_parquet(sorted((rows / "cpu-interpreter" / "blocks").glob("*.parquet")))
    assert set(df["variant"]) == {"my_design"} and (df["status"] == "ok").all() and df["correct"].all()
    assert {(r.BLOCK_SIZE, r.num_warps) for r in df.itertuples()} == {(128, 2), (128, 4), (256, 2), (256, 4)}
    assert set(json.loads(df["blocks_json"].iloc[0])) == {"BLOCK_SIZE", "num_warps"}

    # runners.tune: a few trials over the declared space, each an ok row of the study
    out = ok(run(["-m", "runners.tune", "variant=my_design", "seq=24", *TINY, "trials=3", f"results_dir={rows}",
                  f"hydra.run.dir={tmp_path / 'outputs'}"], extra))
    assert "study my_design-b1-h2-n24-d32-causal-fp16-declared: 3 configs measured (3 ok)" in out
    study = pd.read_parquet(sorted((rows / "cpu-interpreter").glob("tune-my_design-*/*.parquet")))
    assert len(study) == 3 and (study["status"] == "ok").all() and set(study["study"]) == {
        "my_design-b1-h2-n24-d32-causal-fp16-declared"}

    # plots.compare and plots.report: a figure drawn from its rows, the design a Triton design (solid line)
    figures = tmp_path / "figures"
    info = json.loads(ok(run(["-c", PLOTS_AND_REPORT, str(rows), str(figures)], extra)).strip().splitlines()[-1])
    assert info["is_triton"] and "my_design" in info["order"] and info["variants"] == ["my_design"]
    assert info["order"].index("my_design") < info["order"].index("sdpa_flash")  # among the designs
    assert {"BLOCK_SIZE"} <= set(info["fields"])
    assert info["legends"] and all(legend == ["my_design"] for legend in info["legends"]), info["legends"]
    assert (figures / "compare" / "compare_cpu-interpreter_fp16.png").read_bytes()[:4] == b"\x89PNG"
    text = (figures / "report" / "report.md").read_text()
    assert "7 rows, 7 correct results, 0 wrong" in text and "compare_cpu-interpreter_fp16.png" in text
    ranked = (figures / "report_gpu" / "report.md").read_text()
    # best overall and best Triton design, with its blocks
    assert re.search(r"\| B1 H2 N40 D32 causal bnhd \| my_design 1\.0 \|( - \|){4} my_design 1\.0 \| w\d SIZE=\d+ \|",
                     ranked), ranked

    # the test matrix: the registry-derived parametrization takes it (its fast cases and its test_blocks)
    listed = ok(run(["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/test_variants.py",
                     "tests/test_block_defaults.py", "-k", "my_design"], extra))
    assert len(re.findall(r"test_matches_reference\[my_design-", listed)) == 32  # 8 shapes x 2 masks x fp32/fp16
    out = ok(run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_variants.py",
                  "tests/test_block_defaults.py", "-k", "my_design", "-m", "not slow"], extra, timeout=600))
    summary = out.strip().splitlines()[-1]
    assert re.match(r"\d+ passed", summary) and "failed" not in summary and "skipped" not in summary, out[-2000:]
    assert int(summary.split()[0]) >= 6  # 2 matrix cases, default blocks, small blocks, 2 architectures' defaults


def test_a_broken_plugin_is_one_warning_and_its_name_one_error(two_file_design, tmp_path):
    """A $FLASH_BWD_PLUGINS module that fails to import stops nothing else; asking for it names the reason."""
    folder, extra = two_file_design
    (tmp_path / "broken_design.py").write_text("raise RuntimeError('not today')\n")
    extra = {**extra, "PYTHONPATH": f"{folder}{os.pathsep}{tmp_path}", PLUGINS_ENV: "my_design,broken_design"}
    proc = run(["-m", "runners.sweep", "variant=broken_design", "seq=40", *TINY, f"results_dir={tmp_path / 'r'}"], extra)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == ("warning: $FLASH_BWD_PLUGINS module 'broken_design' failed to import: "
                        "RuntimeError: not today")
    assert len(lines) == 2 and lines[1].startswith("config error: variant: unknown variant 'broken_design'; known: ")
    assert "my_design" in lines[1] and "two_pass" in lines[1] and lines[1].endswith("RuntimeError: not today)")


# ---- a design in an installed package: the flash_bwd.variants entry point -----------------------------------

def install_example(site) -> None:
    """What `pip install examples/external_design` puts on sys.path: the package and its dist-info, whose
    entry_points.txt is the pyproject's [project.entry-points] table."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    shutil.copytree(EXAMPLE / "flash_bwd_external_example", site / "flash_bwd_external_example",
                    ignore=shutil.ignore_patterns("__pycache__"))
    dist = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = project["entry-points"]
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items()) + "\n"
        for group, points in groups.items()))


def test_entry_point_design_runs_by_variant_name(tmp_path):
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][ENTRY_POINT_GROUP] == {"external_example": "flash_bwd_external_example.variant"}
    assert not (REPO / "conf" / "variant" / "external_example.yaml").exists()
    site = tmp_path / "site"
    install_example(site)
    extra = {"PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    rows = tmp_path / "results"
    out = ok(run(["-m", "runners.sweep", "variant=external_example", "seq=40", *TINY, f"results_dir={rows}", "sweep_id=ep",
                  f"hydra.run.dir={tmp_path / 'outputs'}"], extra))
    assert re.search(r"\[1/1\] external_example b=1 h=2 seq=40 d=32 causal fp16: .* ok", out), out
    df = pd.read_parquet(sorted((rows / "cpu-interpreter" / "ep").glob("*.parquet")))
    assert list(df["variant"]) == ["external_example"] and df["status"].iloc[0] == "ok" and df["correct"].iloc[0]
    assert (df["BLOCK_SIZE"].iloc[0], df["num_warps"].iloc[0]) == (256, 4)  # its dataclass defaults (no rules)
    # the library call sees it too, after the built-in designs
    code = "import variants; print(variants.registry.registered())"
    listed = ok(run(["-c", code], extra)).strip()
    assert listed.endswith("'flex', 'fa4', 'external_example']"), listed

    # a broken entry point beside it: one warning, the others still load, its name is a one-line error
    broken = site / "broken_pkg-1.0.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-pkg\nVersion: 1.0\n")
    (broken / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbroken_example = no_such_module_xyz\n")
    proc = run(["-m", "runners.sweep", "variant=broken_example", "seq=40", *TINY, f"results_dir={rows}"], extra)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 2, proc.stderr
    assert lines[0].startswith("warning: entry point broken_example = no_such_module_xyz (flash_bwd.variants) "
                               "failed to load: ModuleNotFoundError")
    assert lines[1].startswith("config error: variant: unknown variant 'broken_example'; known: ")
    assert "external_example" in lines[1] and "ModuleNotFoundError" in lines[1]


# ---- in process: the derived configs -------------------------------------------------------------------------

@pytest.fixture
def hydra_conf():
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        yield


@pytest.mark.parametrize("name", variants.names())
def test_the_derived_variant_config_is_what_the_yaml_file_holds(name):
    """conf/variant/<name>.yaml is optional: what the registry derives is the same config (comments aside)."""
    path = env.CONF_DIR / "variant" / f"{name}.yaml"
    assert OmegaConf.to_container(OmegaConf.load(path)) == schema.variant_node(name)


def test_derived_grids_are_the_tunable_fields_where_there_is_no_grid_file():
    assert schema.derived_grid("atomic_tma") == {}  # no tunable field: sweep=blocks stays one point
    assert schema.derived_grid("reference") == {}
    assert schema.derived_grid("ws") == variants.get("ws").Blocks.search_space()  # ... but ws keeps its empty file
    assert (env.CONF_DIR / "sweep_grid" / "blocks_ws.yaml").is_file()


@dataclass(frozen=True)
class _LooseBlocks(Blocks):
    BLOCK_M: int = tunable(32, (16, 32))
    num_warps: int = tunable(4, (2, 4, 8))
    loose_switch: bool = tunable(False, (False, True))
    mode: int = 0  # not tunable: not in the grid


@pytest.fixture
def design_without_yaml():
    """A design registered in this process with no yaml file, its derived configs stored; all undone after."""
    name = "loose_design"

    @register_variant(name)
    class Loose(TritonVariant):
        Blocks = _LooseBlocks

    repo = ConfigStore.instance().repo
    try:
        assert name in schema.store_variant_configs()
        yield name
    finally:
        _VARIANTS.pop(name, None)
        for group, entry in (("variant", f"{name}.yaml"), ("sweep_grid", f"blocks_{name}.yaml")):
            repo.get(group, {}).pop(entry, None)
            if group in repo and not repo[group]:
                del repo[group]


def test_a_design_without_yaml_files_composes_and_sweeps_its_tunable_fields(hydra_conf, design_without_yaml):
    name = design_without_yaml
    cfg = compose("config", [f"variant={name}", "blocks.mode=2", "head_dim=64"])
    assert cfg.variant.name == name and OmegaConf.to_container(cfg.blocks) == {
        "BLOCK_M": None, "num_warps": None, "loose_switch": None, "mode": 2}
    point = schema.check(cfg, "cpu")
    assert point.blocks == _LooseBlocks(mode=2) and point.block_overrides == {"mode": 2}
    grid = compose("config", ["sweep=blocks", f"variant={name}"], return_hydra_config=True)
    assert OmegaConf.to_container(grid.hydra.sweeper.params) == {
        "blocks.BLOCK_M": "16,32", "blocks.num_warps": "2,4,8", "blocks.loose_switch": "false,true"}
    jobs = sweep.expand_jobs(["sweep=blocks", f"variant={name}"], multirun=True)
    assert len(jobs) == 12
    points = {schema.check(sweep.compose_job(list(job), {}), "cpu").blocks for job in jobs}
    assert len(points) == 12 and all(p.mode == 0 for p in points)
    assert tune.grid_space(name) == {"BLOCK_M": (16, 32), "num_warps": (2, 4, 8), "loose_switch": (False, True)}


def test_a_name_no_design_has_is_one_line_listing_the_registered_names(capsys, tmp_path):
    known = ", ".join(variants.names())
    with pytest.raises(ConfigError) as info:
        sweep.preflight(["variant=nope", f"results_dir={tmp_path}"], False)
    assert str(info.value) == f"variant: unknown variant 'nope'; known: {known}"
    with pytest.raises(ConfigError, match="unknown variant 'nope'"):
        sweep.preflight(["variant=two_pass,nope", f"results_dir={tmp_path}"], True)
    for cli in (sweep.cli, tune.cli):
        with pytest.raises(SystemExit) as exit_info:
            cli(["variant=nope", f"results_dir={tmp_path}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and err == [f"config error: variant: unknown variant 'nope'; known: {known}"]


def test_entry_points_name_a_module_or_a_variant_class(monkeypatch, capsys):
    """registry.load_external (fresh state, fake entry points): a module registers its own designs; a Variant class
    is registered under the entry point's name; a failing one is a warning and the reason in `get()`'s error."""
    from variants import registry

    class FromClass(TritonVariant):
        Blocks = _LooseBlocks

    class FakeEntryPoint:
        def __init__(self, name, value, load):
            self.name, self.value, self.load = name, value, load

    def module_load():
        register_variant("ep_module_design")(type("FromModule", (TritonVariant,), {}))

    def broken_load():
        raise ImportError("no module named 'gone'")

    points = [FakeEntryPoint("ep_class_design", "pkg.variant:FromClass", lambda: FromClass),
              FakeEntryPoint("ep_module_design", "pkg.other", module_load),
              FakeEntryPoint("ep_broken_design", "gone", broken_load)]
    monkeypatch.setattr(registry, "_external", {"loaded": False, "failed": {}})
    monkeypatch.setattr(registry, "_entry_points", lambda: points)
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    try:
        names = registry.registered()
        assert names[-2:] == ["ep_class_design", "ep_module_design"] and "ep_broken_design" not in names
        assert isinstance(variants.get("ep_class_design"), FromClass) and FromClass.name == "ep_class_design"
        assert capsys.readouterr().err == ("warning: entry point ep_broken_design = gone (flash_bwd.variants) failed "
                                           "to load: ImportError: no module named 'gone'\n")
        with pytest.raises(ValueError, match=r"^unknown variant 'ep_broken_design'; known: .*two_pass.* \(entry point "
                                             r"ep_broken_design = gone \(flash_bwd.variants\) failed to load"):
            variants.get("ep_broken_design")
        registry.registered()  # loaded once per process
        assert capsys.readouterr().err == ""
    finally:
        _VARIANTS.pop("ep_class_design", None)
        _VARIANTS.pop("ep_module_design", None)
