"""Joins that survive schema growth: rows written before a block field existed join the rows written after it
(the field at its declared default), through the runner's own row columns (runners.sweep.config_columns) and
runners.regress. One test adds a field to a Blocks dataclass; one joins the committed H200 grid with rows that
today's code writes for the same configs."""
import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from runners import sweep  # runners.sweep turns the interpreter on before `import variants`
from runners.point import env, schema
from runners.regression import measured as regress
from runners import tables as T
import variants

H200_GRID = Path(__file__).resolve().parent.parent / "results" / "h200" / "fa_grid.parquet"
GPU_NAME = "FAKE-GPU join test"


@pytest.fixture(scope="module", autouse=True)
def hydra_conf():
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="test"):
        yield


@pytest.fixture
def fresh_defaults():
    T.declared_defaults.cache_clear()
    yield
    T.declared_defaults.cache_clear()


def runner_row(overrides: list[str], gpu_name: str = GPU_NAME, timer: str = "do_bench", tflops: float = 300.0) -> dict:
    """The row the runner would write for these overrides (its config columns and config_key; FABRICATED ok
    measurement columns)."""
    cfg = compose("config", overrides)
    point = schema.check(cfg, "cpu")
    return {"config_key": point.config_key(timer), **sweep.config_columns(point, cfg, timer), "timer": timer,
            "status": "ok", "correct": True, "timing_meaningful": True, "tflops": tflops,
            "tflops_p20": tflops * 1.01, "tflops_p80": tflops * 0.99, "gpu_name": gpu_name, "device": "cuda",
            "commit": "f" * 40, "timestamp": "2030-01-01T00:00:00Z"}


POINTS = [["variant=two_pass", "seq=1024", "head_dim=64", "causal=true", "dtype=fp16", "blocks.BLOCK_N1=128"],
          ["variant=two_pass", "seq=512", "head_dim=128", "causal=false", "dtype=fp16"],
          ["variant=atomic", "seq=1024", "head_dim=64", "causal=true", "dtype=fp16"],
          ["variant=fused", "seq=1024", "head_dim=64", "causal=false", "dtype=fp16", "blocks.num_warps=8"]]


def test_a_new_defaulted_block_field_does_not_unjoin_old_rows(monkeypatch, fresh_defaults):
    old = pd.DataFrame([runner_row(p) for p in POINTS])
    for variant, blocks in (("two_pass", variants.blocks.TwoPassBlocks), ("atomic", variants.blocks.AtomicBlocks),
                            ("fused", variants.blocks.FusedBlocks)):
        grown = dataclasses.make_dataclass(f"Grown{blocks.__name__}", [("new_switch", bool, False)],
                                           bases=(blocks,), frozen=True)
        monkeypatch.setattr(type(variants.get(variant)), "Blocks", grown)
    T.declared_defaults.cache_clear()
    new = pd.DataFrame([runner_row(p, tflops=301.0) for p in POINTS])
    assert all("new_switch=False" in k for k in new["config_key"])  # the runner's identity did change ...
    assert not set(old["config_key"]) & set(new["config_key"])
    cmp = regress.compare(T.normalize(old), T.normalize(new))  # ... the join did not
    assert not cmp.cross_gpu and cmp.n_both == len(POINTS)
    assert not cmp.counts.get("missing in candidate") and not cmp.counts.get("new")
    assert (T.normalize(old)["new_switch"] == False).all()  # noqa: E712 - old rows read with the default

    switched = pd.DataFrame([runner_row(POINTS[0] + ["+blocks.new_switch=true"])])
    assert T.normalize(switched)["join_key"].iloc[0] not in set(T.normalize(old)["join_key"])  # not the default


def _overrides(row) -> list[str]:
    out = [f"variant={row['variant']}", f"seq={row['seq']}", f"seq_k={row['seq_k']}", f"head_dim={row['head_dim']}",
           f"batch={row['batch']}", f"heads={row['heads']}", f"kv_heads={row['kv_heads']}",
           f"causal={str(bool(row['causal'])).lower()}", f"dtype={row['dtype']}", f"layout={row['layout']}"]
    for name, value in json.loads(row["blocks_json"]).items():  # the H200's (Hopper) blocks, as overrides
        out.append(f"blocks.{name}={str(value).lower() if isinstance(value, bool) else value}")
    return out


@pytest.mark.skipif(not H200_GRID.exists(), reason="results/h200/fa_grid.parquet not in this checkout")
@pytest.mark.slow  # reads the committed 186-row grid and resolves every row's blocks (~15 s)
def test_committed_h200_grid_joins_rows_written_by_todays_code(fresh_defaults):
    """The H200 two_pass rows predate the prescale / longest_first fields: their config_key differs from
    today's, and every row of the grid (two_pass, fused, atomic and its deterministic mode, the baselines)
    still joins today's row of the same config."""
    old = pd.read_parquet(H200_GRID)
    new = pd.DataFrame([runner_row(_overrides(r), gpu_name=r["gpu_name"]) for _, r in old.iterrows()])
    two_pass = old["variant"] == "two_pass"
    assert not set(old.loc[two_pass, "config_key"]) & set(new["config_key"])  # the old join found none of them
    cmp = regress.compare(T.normalize(old), T.normalize(new))
    assert not cmp.cross_gpu
    assert not cmp.counts.get("missing in candidate") and not cmp.counts.get("new"), cmp.counts
    joined = set(cmp.table["variant"])
    assert {"two_pass", "fused", "atomic", "atomic+deterministic", "sdpa_flash", "sdpa_cudnn", "flex"} <= joined
    assert cmp.n_both == T.normalize(old)["join_key"].nunique()
