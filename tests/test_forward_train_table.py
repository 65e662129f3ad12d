"""scripts/forward_train_table.py: cells that differ only in their head counts stay apart, and a cell without a
baseline shows – instead of failing (the 2026-11-28 FA4 table had GQA cells beside the FA grid's)."""
import importlib.util
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "forward_train_table.py"


def load():
    spec = importlib.util.spec_from_file_location("forward_train_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(kv_heads: int, tflops: dict) -> list[dict]:
    return [dict(dtype="bf16", timed="backward", batch=4, heads=32, kv_heads=kv_heads, head_dim=64, seq=4096,
                 causal=True, variant=variant, tflops=value, forward_ran="gluon" if variant == "ws" else "own")
            for variant, value in tflops.items()]


def test_gqa_cells_stay_apart_and_a_missing_baseline_is_a_dash():
    script = load()
    frame = pd.DataFrame(rows(4, {"ws": 400.0, "sdpa_cudnn": 320.0, "fa4": 500.0})
                         + rows(8, {"ws": 450.0, "sdpa_cudnn": 300.0}))
    table = script.table(frame).set_index("H / Hkv")
    assert list(table.index) == ["32 / 4", "32 / 8"]
    assert table.loc["32 / 4", "ws / FA4"] == "0.80" and table.loc["32 / 4", "ws / cuDNN"] == "1.25"
    assert table.loc["32 / 8", "FA4"] == "–" and table.loc["32 / 8", "ws / FA4"] == "–"
    assert table.loc["32 / 8", "ws / cuDNN"] == "1.50" and table.loc["32 / 8", "ws's forward"] == "gluon"
    assert script.ranges(table.reset_index()) == ["bf16 backward: × cuDNN 1.25–1.50, × FA4 0.80–0.80"]
