"""Every Hydra config composes; the schema rejects typos and wrong types; the semantic check names the field."""
from dataclasses import fields

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from runners import sweep  # runners.sweep turns the interpreter on before `import variants`
from runners.point import env, schema
import variants

CONF = env.CONF_DIR
DEVICE = "cpu" if env.interpreting() else "cuda"


def block_grid(variant: str) -> dict:
    """The `sweep=blocks` grid a design declares: conf/sweep_grid/blocks_<variant>.yaml's params where the file
    exists (an empty file: no grid), else the one derived from its tunable Blocks fields (schema.derived_grid)."""
    path = CONF / "sweep_grid" / f"blocks_{variant}.yaml"
    if path.is_file():
        return dict(OmegaConf.select(OmegaConf.load(path), "hydra.sweeper.params", default=None) or {})
    return schema.derived_grid(variant)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.fixture(scope="module", autouse=True)
def hydra_conf():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="test"):
        yield


def test_variant_files_match_the_registry():
    assert options("variant") == variants.names()


@pytest.mark.parametrize("name", variants.names())
def test_variant_composes_with_its_block_fields(name):
    cfg = compose("config", [f"variant={name}"])
    assert cfg.variant.name == name
    blocks = OmegaConf.to_container(cfg.blocks)
    assert list(blocks) == [f.name for f in fields(variants.get(name).Blocks)]
    assert all(v is None for v in blocks.values())  # null = the variant's per-problem default
    point = schema.check(cfg, DEVICE)
    assert point.blocks == variants.get(name).make_blocks(point.problem(DEVICE))


@pytest.mark.parametrize("gpu", options("gpu"))
def test_gpu_composes(gpu):
    cfg = compose("config", [f"gpu={gpu}"])
    if gpu == "auto":
        assert cfg.gpu.name == "auto" and cfg.gpu.index == 0 and cfg.gpu.peak_tflops_bf16 is None
    else:
        assert cfg.gpu.peak_tflops_bf16 > 0 and cfg.gpu.mem_bandwidth_tbs > 0 and cfg.gpu.match


@pytest.mark.parametrize("device_name, arch", [("NVIDIA H100 80GB HBM3", "h100_sxm"), ("NVIDIA H200", "h200"),
                                               ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA H100 PCIe", None),
                                               ("NVIDIA GeForce RTX 4090", None)])
def test_auto_gpu_matches_arch_files(device_name, arch):
    assert env.match_arch(device_name) == arch
    spec = env.gpu_spec({"name": "auto", "index": 0}, device_name)
    if arch is None:
        assert spec["peak_tflops_bf16"] is None and spec["gpu"] == env.slug(device_name)
    else:
        assert spec["peak_tflops_bf16"] == env.arch_specs()[arch]["peak_tflops_bf16"]


def test_datasheet_peaks():
    specs = env.arch_specs()
    assert {k: (v["peak_tflops_bf16"], v["mem_bandwidth_tbs"]) for k, v in specs.items()} == {
        "h100_sxm": (989, 3.35), "h200": (989, 4.8), "a100": (312, 2.0)}


@pytest.mark.parametrize("bench", options("bench"))
def test_bench_composes(bench):
    cfg = compose("config", [f"bench={bench}"])
    assert cfg.bench.cuda_graph == (bench == "graph")
    assert cfg.bench.warmup >= 0 and cfg.bench.rep > 0


def test_defaults():
    cfg = compose("config")
    assert (cfg.variant.name, cfg.dtype, cfg.layout, cfg.gpu.name, cfg.seq_k, cfg.kv_heads) == (
        "two_pass", "bf16", "bnhd", "auto", None, None)
    assert cfg.results_dir == "results" and cfg.resume is True
    assert cfg.bench.flush_l2 is True and cfg.bench.cuda_graph is False


def test_hydra_settings():
    cfg = compose("config", return_hydra_config=True)
    assert cfg.hydra.job.chdir is False
    assert cfg.hydra.run.dir.startswith("outputs/") and cfg.hydra.sweep.dir.startswith("multirun/")
    assert cfg.hydra.callbacks.summary._target_ == "runners.sweep.SummaryCallback"


@pytest.mark.parametrize("preset, variant", [("seq_scan", "two_pass"), *[("blocks", v) for v in variants.names()]])
def test_sweep_presets(preset, variant):
    cfg = compose("config", [f"sweep={preset}", f"variant={variant}"], return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params) if cfg.hydra.sweeper.params else {}
    if preset == "seq_scan":
        assert set(params) == {"seq"}
    elif block_grid(variant):  # the block search sweeps block fields of this variant only
        names = {f.name for f in fields(variants.get(variant).Blocks)}
        assert params and {k.removeprefix("blocks.") for k in params} <= names
        assert all(k.startswith("blocks.") for k in params)
    else:
        assert params == {}  # a baseline has no block grid: one point
    jobs = sweep.expand_jobs([f"sweep={preset}", f"variant={variant}"], multirun=True)
    expected = 1
    for values in params.values():
        expected *= len(str(values).split(","))
    assert len(jobs) == expected
    composed = {}
    for job in jobs:  # every point of every grid is a valid block combo for its variant
        schema.check(sweep.compose_job(list(job), composed), DEVICE)


def test_sweep_presets_compose_for_every_variant():
    for preset in options("sweep"):
        for name in variants.names():
            compose("config", [f"sweep={preset}", f"variant={name}"], return_hydra_config=True)


def test_blocks_override_field_by_field():
    cfg = compose("config", ["variant=atomic", "blocks.BLOCK_M=32", "blocks.num_warps=8", "head_dim=64"])
    point = schema.check(cfg, DEVICE)
    assert point.block_overrides == {"BLOCK_M": 32, "num_warps": 8}
    default = variants.get("atomic").make_blocks(point.problem(DEVICE))
    assert point.blocks.BLOCK_M == 32 and point.blocks.num_warps == 8
    assert point.blocks.BLOCK_N == default.BLOCK_N and point.blocks.num_stages == default.num_stages


@pytest.mark.parametrize("overrides", [["seqq=5"], ["seq=abc"], ["causal=maybe"], ["bench.rep=fast"],
                                       ["variant=atomic", "blocks.BLOCK_M1=64"], ["gpu.peak=3"]],
                         ids=lambda o: " ".join(o))
def test_schema_rejects_typos_and_types(overrides):
    with pytest.raises((ConfigCompositionException, ConfigKeyError, ValidationError)):
        compose("config", overrides)


@pytest.mark.parametrize("overrides, field", [
    (["seq=0"], "seq"), (["seq_k=-1"], "seq_k"), (["head_dim=0"], "head_dim"), (["head_dim=257"], "head_dim"),
    (["batch=0"], "batch"), (["heads=3", "kv_heads=2"], "kv_heads"), (["dtype=fp8"], "dtype"),
    (["layout=nhbd"], "layout"), (["variant=atomic", "blocks.BLOCK_M=48"], "blocks.BLOCK_M"),
    (["variant=fused", "blocks.BLOCK_M1=16"], "blocks.BLOCK_M1"), (["variant=atomic", "blocks.num_warps=3"],
                                                                  "blocks.num_warps"),
    (["+blocks.FOO=1"], "blocks"), (["bench.rep=0"], "bench.rep"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_semantic_check_names_the_field(overrides, field):
    with pytest.raises(schema.ConfigError) as info:
        schema.check(compose("config", overrides), DEVICE)
    assert info.value.field == field
    assert str(info.value).startswith(field) and "\n" not in str(info.value)


def test_tokens_and_hidden_fix_batch_times_seq_and_heads_times_head_dim():
    from runners.point.schema import check
    cfg = compose("config", ["seq=4096", "head_dim=64", "tokens=16384", "hidden=2048"])
    point = check(cfg, "cpu")
    assert (point.batch, point.heads, point.kv_heads) == (4, 32, 32)
    cfg = compose("config", ["seq=32768", "head_dim=128", "tokens=16384", "hidden=2048", "kv_heads=4"])
    point = check(cfg, "cpu")
    assert (point.batch, point.heads, point.kv_heads) == (1, 16, 4)
