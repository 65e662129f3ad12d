"""FABRICATED result rows for tests and demos of plots/ and runners/regress — never real measurements.

The GPU names say FAKE so that a synthetic table can never pass for a measured one. The columns follow the
result schema the runner writes (one row per point, long format).
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

_BASE = {"two_pass": 300.0, "atomic": 260.0, "fused": 330.0, "sdpa_flash": 280.0, "sdpa_cudnn": 350.0,
         "sdpa_efficient": 150.0, "flex": 200.0, "reference": 40.0}
_DEFAULT_BLOCKS = {
    "two_pass": {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 4, "num_stages": 2},
    "atomic": {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "deterministic": False},
    "fused": {"BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 32, "BLK_SLICE_FACTOR": 2,
              "prescale": True, "num_warps": 4, "num_stages": 2},
}


def row(variant: str, seq: int, head_dim: int, causal: bool, *, gpu_name: str = "FAKE-GPU-A 80GB",
        peak_tflops: float = 1000.0, speed: float = 1.0, spread: float = 0.02, blocks: dict | None = None,
        status: str = "ok", correct: bool = True, batch: int = 4, heads: int = 16, dtype: str = "bf16",
        commit: str = "a" * 40, timestamp: str = "2025-01-01T00:00:00Z", sweep_id: str = "compare",
        device: str = "cuda", timing_meaningful: bool = True) -> dict:
    """One fabricated row. TFLOPS grow with seq and head_dim; ``speed`` scales them; p20/p80 = ±``spread``."""
    blocks = dict(_DEFAULT_BLOCKS.get(variant, {}) if blocks is None else blocks)
    ok = status in ("ok", "wrong")  # a wrong point may still carry timings: plots must not draw them
    tflops = _BASE.get(variant, 100.0) * speed * seq / (seq + 1024) * (head_dim / 128) ** 0.3
    tflops *= 0.85 if causal else 1.0
    tflops *= 1.0 + 0.05 * np.log2(blocks.get("BLOCK_N", blocks.get("BLOCK_N1", 64)) / 64) - 0.02 * abs(
        np.log2(blocks.get("BLOCK_M", blocks.get("BLOCK_M1", 64)) / 64))
    flops = 2.5 * 4 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)
    ms = flops / (tflops * 1e9)
    key_cfg = {"variant": variant, "seq": seq, "seq_k": seq, "head_dim": head_dim, "batch": batch, "heads": heads,
               "kv_heads": heads, "causal": causal, "dtype": dtype, "layout": "bhnd", "blocks": blocks}
    out = {
        "variant": variant, "seq": seq, "seq_k": seq, "head_dim": head_dim, "batch": batch, "heads": heads,
        "kv_heads": heads, "causal": causal, "dtype": dtype, "layout": "bhnd",
        **{f: np.nan for f in ("BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2",
                               "BLK_SLICE_FACTOR", "num_warps", "num_stages")},
        "prescale": None, "deterministic": None,
        "blocks_json": json.dumps(blocks, sort_keys=True),
        "config_key": json.dumps(key_cfg, sort_keys=True),
        "ms": ms if ok else np.nan, "ms_p20": ms * (1 - spread) if ok else np.nan,
        "ms_p80": ms * (1 + spread) if ok else np.nan,
        "tflops": tflops if ok else np.nan, "tflops_p20": tflops * (1 - spread) if ok else np.nan,
        "tflops_p80": tflops * (1 + spread) if ok else np.nan,
        "executed_tflops": tflops * 1.2 if ok else np.nan,
        "pct_peak": 100 * tflops / peak_tflops if ok else np.nan,
        "peak_mem_bytes": float(batch * heads * seq * head_dim * 2 * (12 if variant == "atomic" else 9)
                                + (batch * heads * seq * seq * 4 if variant == "reference" else 0)) if ok else np.nan,
        "workspace_bytes": float(batch * heads * seq * head_dim * 4 if variant == "atomic" else 0) if ok else np.nan,
        "correct": bool(correct and ok) if status in ("ok", "wrong") else False,
        "max_abs_dq": 1e-3, "max_abs_dk": 1e-3, "max_abs_dv": 1e-3, "rel_dq": 1e-3, "rel_dk": 1e-3, "rel_dv": 1e-3,
        "timing_meaningful": timing_meaningful, "status": status,
        "reason": "" if status == "ok" else f"fabricated {status}",
        "device": device, "gpu_name": gpu_name, "compute_capability": "9.0", "sm_count": 132,
        "driver": "000.00", "cuda": "12.x", "torch": "2.x-fake", "triton": "3.x-fake", "python": "3.11",
        "hostname": "fake-host", "commit": commit, "dirty": False, "timestamp": timestamp, "sweep_id": sweep_id,
        "peak_tflops": peak_tflops,
    }
    for field, value in blocks.items():
        out[field] = value
    return out


def table(*, seqs=(512, 1024, 2048, 4096, 8192), head_dims=(64, 128), causals=(False, True),
          variants=("two_pass", "atomic", "fused", "sdpa_flash", "sdpa_cudnn", "flex"), failures: bool = True,
          **kwargs) -> pd.DataFrame:
    """A compare-sweep table; with ``failures`` one wrong, one oom and one unsupported point."""
    rows = [row(v, s, d, c, **kwargs) for v, s, d, c in itertools.product(variants, seqs, head_dims, causals)]
    df = pd.DataFrame(rows)
    if failures:
        df = _fail(df, "atomic", seqs[-1], head_dims[-1], True, status="wrong", correct=False)
        df = _fail(df, "fused", seqs[-1], head_dims[0], False, status="oom")
        df = _fail(df, "flex", seqs[0], head_dims[-1], True, status="unsupported")
    return df


def _fail(df, variant, seq, head_dim, causal, *, status, correct=False):
    sel = (df["variant"] == variant) & (df["seq"] == seq) & (df["head_dim"] == head_dim) & (df["causal"] == causal)
    df = df.copy()
    df.loc[sel, "status"] = status
    df.loc[sel, "correct"] = correct
    if status != "wrong":
        for col in ("ms", "ms_p20", "ms_p80", "tflops", "tflops_p20", "tflops_p80", "pct_peak", "peak_mem_bytes"):
            df.loc[sel, col] = np.nan
    df.loc[sel, "reason"] = f"fabricated {status}"
    return df


def block_sweep(*, variants=("atomic", "two_pass"), seqs=(2048, 8192), head_dim=128, causal=False,
                **kwargs) -> pd.DataFrame:
    """A sweep=blocks table: BLOCK_M × BLOCK_N (M1 × N1) × num_warps, one wrong and one resources cell."""
    rows = []
    for variant, seq in itertools.product(variants, seqs):
        for m, n, warps in itertools.product((32, 64, 128), (32, 64, 128), (4, 8)):
            blocks = dict(_DEFAULT_BLOCKS[variant])
            if "BLOCK_M" in blocks:
                blocks.update(BLOCK_M=m, BLOCK_N=n)
            else:
                blocks.update(BLOCK_M1=m, BLOCK_N1=n)
            blocks["num_warps"] = warps
            status, correct = "ok", True
            if m == 128 and n == 128:
                status, correct = "resources", False
            elif m == 32 and n == 128 and warps == 8:
                status, correct = "wrong", False
            rows.append(row(variant, seq, head_dim, causal, blocks=blocks, status=status, correct=correct,
                            sweep_id="blocks", speed=1.0 + (0.03 if warps == 8 else 0.0), **kwargs))
    return pd.DataFrame(rows)


_STEP_MS = {"two_pass": 7.0, "atomic": 9.0, "fused": 8.5, "sdpa_flash": 8.0, "sdpa_cudnn": 6.5, "flex": 10.0}
_MODELS = {"gpt_d64": {"layers": 2, "d_model": 256, "heads": 4, "kv_heads": 4, "head_dim": 64},
           "gpt_d128": {"layers": 2, "d_model": 512, "heads": 4, "kv_heads": 4, "head_dim": 128}}


def step_row(variant: str, mode: str = "eager", *, model: str = "gpt_d64", seq: int = 4096, batch: int = 2,
             speed: float = 1.0, spread: float = 0.02, status: str = "ok", loss_max_dev: float = 1e-4,
             gpu_name: str = "FAKE-GPU-A 80GB", commit: str = "a" * 40, timestamp: str = "2025-01-01T00:00:00Z",
             device: str = "cuda", timing_meaningful: bool = True) -> dict:
    """One fabricated model-step row (the columns runners.model_step writes). Step ms grow with seq; compiled
    modes are faster; ``speed`` divides the time; p20/p80 = ±``spread``. ``status="wrong"`` keeps its timings
    (a design off the loss curve), any other failure has none."""
    config = {**_MODELS[model], "seq": seq, "batch": batch, "vocab": 128, "dtype": "bf16", "causal": True, "lag": 7,
              "lr": 0.003, "steps": 30, "loss_floor": 0.01, "warmup": 5, "rep": 20}
    timed = status in ("ok", "wrong")
    ms = _STEP_MS.get(variant, 9.0) * seq / 4096 * (config["head_dim"] / 64) ** 0.5 / speed
    ms *= {"eager": 1.0, "default": 0.6}.get(mode, 0.35)
    share = 0.2 + 0.1 * (variant == "atomic") + 0.05 * (mode != "eager")
    key = {"bench_kind": "model_step", "model": model, **config, "variant": variant, "compile_mode": mode,
           "baseline": "sdpa_flash", "seed": 0}
    nan = np.nan
    return {
        "sweep_id": "model_step", "config_key": json.dumps(key, sort_keys=True), "bench_kind": "model_step",
        "variant": variant, "compile_mode": mode, "compiled": mode != "eager", "model": model, **config,
        "seq_k": seq, "layout": "bnhd", "seed": 0, "agreement_baseline": "sdpa_flash", "agreement_steps": 30,
        "timing_meaningful": timing_meaningful, "status": status, "correct": status == "ok",
        "reason": "" if status == "ok" else f"fabricated {status}",
        "ms": ms if timed else nan, "ms_p20": ms * (1 - spread) if timed else nan,
        "ms_p80": ms * (1 + spread) if timed else nan,
        "loss_max_dev": (0.05 if status == "wrong" else loss_max_dev) if timed else nan,
        "loss_spread": 0.004 if timed else nan, "loss_tol": 0.01 if timed else nan,
        "kernel_ms_sum": 0.9 * ms if timed else nan, "attn_bwd_ms": 0.9 * ms * share if timed else nan,
        "attn_bwd_share": share if timed else nan,
        "device": device, "gpu_name": gpu_name, "compute_capability": "9.0", "sm_count": 132, "driver": "000.00",
        "cuda": "12.x", "torch": "2.x-fake", "triton": "3.x-fake", "python": "3.11", "hostname": "fake-host",
        "commit": commit, "dirty": False, "timestamp": timestamp,
    }


def step_table(*, variants=("two_pass", "atomic", "fused", "sdpa_flash", "sdpa_cudnn"), modes=("eager", "default"),
               models=(("gpt_d64", 4096), ("gpt_d128", 4096)), failures: bool = True, **kwargs) -> pd.DataFrame:
    """A model-step table; with ``failures`` fused is wrong (off the loss curve) on the last model in the first mode
    and flex is an oom there."""
    rows = [step_row(v, m, model=name, seq=seq, **kwargs) for (name, seq), v, m in
            itertools.product(models, variants, modes)]
    if failures:
        name, seq = models[-1]
        rows = [step_row(r["variant"], r["compile_mode"], model=name, seq=seq, status="wrong", **kwargs)
                if (r["variant"], r["compile_mode"], r["model"]) == ("fused", modes[0], name) else r for r in rows]
        rows.append(step_row("flex", modes[0], model=name, seq=seq, status="oom", **kwargs))
    return pd.DataFrame(rows)


def write(df: pd.DataFrame, directory: str | Path, per_row: bool = False) -> Path:
    """Write ``df`` as parquet under ``directory``: one file, or one file per row like the runner does."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if per_row:
        for i in range(len(df)):
            df.iloc[[i]].to_parquet(directory / f"point-{i:05d}.parquet", index=False)
    else:
        df.to_parquet(directory / "table.parquet", index=False)
    return directory


_KERNELS = {"two_pass": (("_dkdv_kernel", 0.62), ("_dq_kernel", 0.33), ("_delta_kernel", 0.05)),
            "atomic": (("_dkdv_kernel", 0.90), ("_delta_kernel", 0.04), ("vectorized_elementwise_kernel", 0.06)),
            "fused": (("_fused_kernel", 0.95), ("_delta_kernel", 0.05)),
            "sdpa_flash": (("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", 0.9), ("flash_bwd_dot_do_o_kernel", 0.1))}


def with_explanation(df: pd.DataFrame, coverage: float = 0.97) -> pd.DataFrame:
    """FABRICATED per-kernel times and compiled resources (the columns runners/point/profile.py writes) for the
    timed rows of a table: kernels add up to ``coverage`` × ms; registers grow with the block sizes."""
    df = df.copy()
    for col in ("kernel_ms", "resources_json", "top_kernel", "top_triton_kernel", "occupancy_limiter"):
        df[col] = None
    for col in ("kernel_ms_sum", "top_kernel_share", "n_regs", "n_spills", "smem_bytes", "programs_per_sm"):
        df[col] = np.nan
    for i, r in df.iterrows():
        if not np.isfinite(r["ms"]) or r["variant"] not in _KERNELS:
            continue
        kernels = {name: share * coverage * r["ms"] for name, share in _KERNELS[r["variant"]]}
        blocks = json.loads(r["blocks_json"])
        tile = blocks.get("BLOCK_M", blocks.get("BLOCK_M1", 64)) * blocks.get("BLOCK_N", blocks.get("BLOCK_N1", 64))
        warps = blocks.get("num_warps", 4)
        resources = {}
        if r["variant"] in ("two_pass", "atomic", "fused"):
            for name, _ in _KERNELS[r["variant"]]:
                if name.startswith("_"):
                    regs = min(255, 64 + tile // (warps * 16))
                    resources[name] = {"n_regs": regs, "n_spills": max(0, tile // 64 - 100), "smem_bytes": tile * 8,
                                       "num_warps": warps, "num_stages": 2, "programs_per_sm": max(1, 65536 // (
                                           regs * 32 * warps)), "limiter": "regs", "grid_programs": 4096,
                                       "waves": 10.0}
        heavy = max(resources, key=kernels.get) if resources else None
        top = max(kernels, key=kernels.get)
        df.at[i, "kernel_ms"] = json.dumps(kernels)
        df.at[i, "kernel_ms_sum"] = sum(kernels.values())
        df.at[i, "top_kernel"] = top
        df.at[i, "top_kernel_share"] = kernels[top] / sum(kernels.values())
        if heavy:
            df.at[i, "resources_json"] = json.dumps(resources)
            df.at[i, "top_triton_kernel"] = heavy
            for col, key in (("n_regs", "n_regs"), ("n_spills", "n_spills"), ("smem_bytes", "smem_bytes"),
                             ("programs_per_sm", "programs_per_sm"), ("occupancy_limiter", "limiter")):
                df.at[i, col] = resources[heavy][key]
    return df


def with_ncu(df: pd.DataFrame) -> pd.DataFrame:
    """FABRICATED Nsight Compute columns (runners/point/ncu.py) for the rows that carry ``kernel_ms`` (run
    ``with_explanation`` first): each kernel's tensor-pipe % grows with the row's % of peak, the small kernels are
    memory-bound; rows without kernels keep them empty with a note."""
    df = df.copy()
    for col in ("ncu_tensor_pct", "ncu_dram_pct", "ncu_kernel_ms"):
        df[col] = None
    df["top_kernel_tensor_pct"] = np.nan
    df["top_kernel_dram_pct"] = np.nan
    df["ncu_note"] = "point not ok: not profiled"
    for i, r in df.iterrows():
        kernels = json.loads(r["kernel_ms"]) if isinstance(r.get("kernel_ms"), str) and r["kernel_ms"] else {}
        if not kernels:
            continue
        busy = min(95.0, 1.1 * r["pct_peak"]) if np.isfinite(r["pct_peak"]) else 50.0
        total = sum(kernels.values())
        tensor = {k: round(busy * (1.0 if ms / total > 0.2 else 0.05), 2) for k, ms in kernels.items()}
        dram = {k: round(15.0 if ms / total > 0.2 else 80.0, 2) for k, ms in kernels.items()}
        top = max(kernels, key=kernels.get)
        df.at[i, "ncu_tensor_pct"] = json.dumps(tensor)
        df.at[i, "ncu_dram_pct"] = json.dumps(dram)
        df.at[i, "ncu_kernel_ms"] = json.dumps(kernels)
        df.at[i, "top_kernel_tensor_pct"] = tensor[top]
        df.at[i, "top_kernel_dram_pct"] = dram[top]
        df.at[i, "ncu_note"] = None
    return df
