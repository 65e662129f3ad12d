"""scripts/tile_cost_fit.py: the per-step and per-tile costs it fits are the ones synthetic rows were made with."""
import json
import sys

import pandas as pd

from runners.point import env

sys.path.insert(0, str(env.REPO / "scripts"))
import tile_cost_fit  # noqa: E402


def test_tile_counts_of_a_causal_walk():
    # 4 key blocks of 128 over 64-row query blocks: 8, 6, 4, 2 steps; without the mask 8 each
    assert tile_cost_fit.tile_counts(512, 64, 128, True) == (20, 4)
    assert tile_cost_fit.tile_counts(512, 64, 128, False) == (32, 4)


def test_the_fit_recovers_the_costs_rows_were_made_with(tmp_path):
    step_us, tile_us, sms = 2.0, 9.0, 132
    rows = []
    for seq in (1024, 4096, 16384):
        batch, heads = 16384 // seq, 16
        steps, tiles = tile_cost_fit.tile_counts(seq, 64, 128, True)
        ms = (steps * step_us + tiles * tile_us) * batch * heads / sms / 1e3
        rows.append(dict(variant="ws", head_dim=128, causal=True, seq=seq, seq_k=seq, batch=batch, heads=heads,
                         status="ok", sm_count=sms, kernel_ms=json.dumps({"main": ms, "delta": ms / 20}),
                         config_key=f"ws|{seq}", correct=True, gpu_name="NVIDIA H100 80GB HBM3", commit="abc",
                         timestamp=f"2026-11-27T00:00:0{len(rows)}"))  # a result table's required columns
    pd.DataFrame(rows).to_parquet(tmp_path / "rows.parquet")
    table = tile_cost_fit.fit(pd.read_parquet(tmp_path / "rows.parquet"), tile_cost_fit.DEFAULT_TILES, sms)
    (line,) = table.to_dict("records")
    assert abs(line["step_us"] - step_us) < 1e-6 and abs(line["tile_us"] - tile_us) < 1e-6
    assert line["max_residual_ms"] < 1e-9
    assert tile_cost_fit.main([str(tmp_path / "rows.parquet")]) == 0
