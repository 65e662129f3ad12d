"""Which committed tables are the current answer, per GPU folder and study (issue 45). Data only; no pandas.
``python -m runners.current`` prints the paths and writes ``results/CURRENT.md`` from CURRENT below; RULE says
what makes a table current.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Current:
    gpu: str  # the folder under results/: h100, h200, h200x2, ...
    study: str  # a short name a tool can pass (--study)
    what: str  # one line: what the study measures
    paths: tuple[str, ...]  # the current tables, relative to the repository
    notes: tuple[str, ...]  # the pages that tell the study's history (NOTES, folder READMEs)


def _pair(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.format(dtype=dtype) for dtype in ("bf16", "fp16"))


RULE = ("A table is current when it is the newest table that measures the whole study (every cell of the study's "
        "grid, every design and baseline of its time) on that GPU. A table that re-measures part of a study (an A/B, "
        "a probe, one design's tiles) never replaces it. When a new round replaces a table, its entry in "
        "`runners/tables/current.py` changes and the old table becomes history: it stays where it is (other pages "
        "link to it), this index lists it under History, and the pages named with the study say what it measured.")
H100_NOTES, H200_NOTES = "results/h100/NOTES.md", "results/h200/NOTES.md"
MODEL_STEP_TAGS = ("", "_bc", "_d128_4k", "_d128_16k_compiled", "_d128_16k_flex_compiled", "_d64_4k", "_d64_16k")

CURRENT: tuple[Current, ...] = (
    Current("h100", "fa_grid", "the FlashAttention papers' grid, every design and baseline, FA4 included",
            _pair("results/h100/fa4/7ead8fa/h100_gluon_grid_{dtype}_7ead8fa.parquet"),
            ("results/h100/fa4/7ead8fa/README.md", "results/h100/fa4/README.md", "results/h100/gluon/README.md",
             H100_NOTES)),
    Current("h100", "large_d", "head dims 96, 192, 256 (B2 H16 N4096 bf16), FA4 included",
            ("results/h100/fa4/7ead8fa/h100_gluon_large_d_bf16_7ead8fa.parquet",),
            ("results/h100/fa4/7ead8fa/README.md", "results/h100/fa4/README.md", H100_NOTES)),
    Current("h100", "fa4_cases", "GQA, packed documents, a window and a softcap beside FA4 (bf16)",
            ("results/h100/fa4/7ead8fa/h100_gluon_cases_bf16_7ead8fa.parquet",),
            ("results/h100/fa4/7ead8fa/README.md", "results/h100/fa4/README.md")),
    Current("h100", "ws_fa4_grid", "ws at 93f600e's defaults (FA4's D64 tile at D64 causal from 4096 keys, persistent "
            "at D64 non-causal below 4096) beside cuDNN and FA4 on the FA grid, bf16; fp16 at 0392993's (issue 43)",
            ("results/h100/fa4/93f600e/h100_ws_fa4_grid_bf16_93f600e.parquet",
             "results/h100/fa4/0392993/h100_gluon_grid_fp16_0392993.parquet"),
            ("results/h100/fa4/93f600e/README.md", "results/h100/fa4/0392993/README.md",
             "results/h100/gluon/ab_issue43/dq_first/README.md", H100_NOTES)),
    Current("h100", "ws_fa4_gqa_large_d", "ws at 93f600e's defaults beside cuDNN and FA4: issue 43's GQA cells (B4 "
            "N4096), D96 / 192 / 256 and 192 / 128 (B2 H16 N4096, ws_two_pass too), bf16, backward",
            ("results/h100/fa4/93f600e/h100_ws_fa4_gqa_bf16_93f600e.parquet",
             "results/h100/fa4/93f600e/h100_ws_fa4_large_d_bf16_93f600e.parquet",
             "results/h100/fa4/93f600e/h100_ws_fa4_mla_192_128_bf16_93f600e.parquet"),
            ("results/h100/fa4/93f600e/README.md", H100_NOTES)),
    Current("h100", "ws_fa4_causal", "ws at d3f9340's defaults (scheduled_chunks at D64 / D128 causal, the persistent "
            "Gluon forward) beside cuDNN and FA4 on the FA grid's causal cells, bf16, forward / train / backward rows "
            "(issues 42, 43)",
            ("results/h100/fa4/d3f9340/h100_causal_fwd_bwd_train.parquet",),
            ("results/h100/fa4/d3f9340/README.md", "results/h100/fa4/38e8bad/README.md", H100_NOTES)),
    Current("h100", "ws_fa4_causal_gqa", "ws at 7902473's defaults (FA4's swap-AB tile at D64 causal from 4096 keys) "
            "beside cuDNN and FA4: the FA grid's causal cells (backward and forward rows, bf16) and issue 43's GQA "
            "cells (B4 N4096 H32/Hkv4 and Hkv8, D64 / D128, causal and not, backward) (issues 42, 43)",
            ("results/h100/fa4/7902473/h100_causal_gqa_fwd_bwd.parquet",),
            ("results/h100/fa4/7902473/README.md", H100_NOTES)),
    Current("h100", "ws_fa4_train", "ws at d3f9340's defaults beside cuDNN and FA4, forward / train / backward rows, "
            "FA grid bf16 non-causal (the causal cells: ws_fa4_causal), fp16 causal and not, and 192 / 128's backward "
            "(issues 42, 43, 47)",
            ("results/h100/fa4/d3f9340/h100_noncausal_fwd_bwd_train.parquet",
             "results/h100/fa4/d3f9340/h100_mla_192_128.parquet",
             "results/h100/fa4/d3f9340/h100_fp16_fwd_bwd_train.parquet"),
            ("results/h100/fa4/d3f9340/README.md", H100_NOTES)),
    Current("h100", "ncu_ws_fa4", "Nsight Compute of ws's and FA4's main backward kernels on one lease, B4 H16 N4096 "
            "causal D64 / D128 (issue 43)",
            ("results/h100/gluon/ncu_fa4_d3f9340/h100_ncu_compare_d64causalseq4096.parquet",
             "results/h100/gluon/ncu_fa4_d3f9340/h100_ncu_compare_d128causalseq4096.parquet"),
            ("results/h100/gluon/ncu_fa4_d3f9340/README.md",)),
    Current("h100", "ws_fa4_cases", "ws at 0392993's defaults beside cuDNN and FA4: GQA H32/Hkv8 D128, a window and "
            "a softcap (bf16, issue 43)", ("results/h100/fa4/0392993/h100_gluon_cases_bf16_0392993.parquet",),
            ("results/h100/fa4/0392993/README.md", H100_NOTES)),
    Current("h100", "gqa_defaults", "GQA H32/Hkv4 D64 and H32/Hkv8 D128 at ws's group_split defaults beside FA4 and "
            "cuDNN, bf16 and fp16 (issue 43)",
            tuple(f"results/h100/gluon/ab_issue43/group_split/h100_gluon_cases_gqa_{dtype}_defaults_v4.parquet"
                  for dtype in ("bf16", "fp16")),
            ("results/h100/gluon/ab_issue43/group_split/README.md", H100_NOTES)),
    Current("h100", "stock_grid", "the FA grid of the stock Triton designs and the baselines (issue 9)",
            ("results/h100/h100_issue9_grid.parquet",), (H100_NOTES,)),
    Current("h100", "stock_headdims", "the stock Triton designs at large head dims (issue 9)",
            ("results/h100/headdims/h100_issue9_headdims.parquet",), ("results/h100/headdims/README.md",)),
    Current("h100", "modifiers", "sliding windows, softcap, FLA's forget gate against flex (issue 24)",
            tuple(f"results/h100/modifiers/h100_modifiers_{tag}.parquet"
                  for tag in ("16k_d128", "16k_d64", "4k", "ws_tiles", "ws_d64")),
            ("results/h100/modifiers/README.md",)),
    Current("h100", "varlen", "packed variable-length batches", ("results/h100/varlen/varlen.parquet",),
            ("results/h100/varlen/README.md",)),
    Current("h100", "model_step", "a training step of a small decoder, fp32-truth gate",
            tuple(f"results/h100/model_step/h100_model_step_truth{tag}.parquet" for tag in MODEL_STEP_TAGS),
            ("results/h100/model_step/README.md",)),
    Current("h100", "host_cost", "host time of one eager forward + backward call (issue 44)",
            ("results/h100/host_cost/h100_host_cost_eb39e7f.parquet", "results/h100/host_cost/h100_host_cost_93f600e.parquet"), ("docs/host_cost.md", H100_NOTES)),
    Current("h100", "late_stats", "ws's late_stats off and on at D128 non-causal (FA grid bf16), D96 (B2 N4096) and with "
            "softcap / a window (B1 N16k) (issue 43)",
            ("results/h100/gluon/ab_issue43/late_stats/h100_late_stats_d128.parquet",
             "results/h100/gluon/ab_issue43/late_stats/h100_late_stats_d96.parquet",
             "results/h100/gluon/ab_issue43/late_stats/h100_late_stats_modifiers.parquet"),
            ("results/h100/gluon/ab_issue43/late_stats/README.md", H100_NOTES)),
    Current("h100", "named_handover", "ws's dQ hand-over by a named barrier (named_handover) off and on, FA grid bf16, "
            "two orders, FA4 beside (issue 43)",
            ("results/h100/gluon/ab_issue43/named_handover/h100_named_handover_ab.parquet",),
            ("results/h100/gluon/ab_issue43/named_handover/README.md", H100_NOTES)),
    Current("h100", "split_masked", "ws's masked and unmasked steps in loops of their own (split_masked) off and on, "
            "two orders, causal cells at D64 / 96 / 128 / 192 and GQA; D128 causal with the non-causal fields (issue 43)",
            ("results/h100/gluon/ab_issue43/split_masked/h100_split_masked_ab.parquet",
             "results/h100/gluon/ab_issue43/split_masked/h100_split_masked_d128_causal_combos.parquet",
             "results/h100/gluon/ab_issue43/split_masked/h100_mask_branch_probe.parquet"),
            ("results/h100/gluon/ab_issue43/split_masked/README.md", H100_NOTES)),
    Current("h100", "dq_first", "ws's dQ wgmma before dK's (dq_first) off and on, two orders: D128 (FA grid cells, "
            "GQA, fp16, softcap, window), D64, D96; D128 causal with named_handover and late_stats (issue 43)",
            ("results/h100/gluon/ab_issue43/dq_first/h100_dq_first_ab.parquet",
             "results/h100/gluon/ab_issue43/dq_first/h100_dq_first_causal_combos.parquet",
             "results/h100/gluon/ab_issue43/dq_first/h100_dq_first_more.parquet"),
            ("results/h100/gluon/ab_issue43/dq_first/README.md", H100_NOTES)),
    Current("h100", "split96", "D96 in 64 + 32 head-dim chunks, ws / ws_two_pass off and on, FA4 beside (issue 43)",
            ("results/h100/gluon/ab_issue43/split96/h100_split96_ab_r1.parquet",
             "results/h100/gluon/ab_issue43/split96/h100_split96_ab_r2.parquet",
             "results/h100/gluon/ab_issue43/split96/h100_split96_fa4.parquet"),
            ("results/h100/gluon/ab_issue43/split96/README.md", "docs/ws.md")),
    Current("h100", "chunk_tiles192", "D192 shared tiles as 128 + 64 column tiles: two stages (issue 43)",
            ("results/h100/gluon/ab_issue43/chunk_tiles192/h100_chunk_tiles_d192.parquet",
             "results/h100/gluon/ab_issue43/chunk_tiles192/h100_chunk_tiles_192_128_and_ws_two_pass.parquet"),
            ("results/h100/gluon/ab_issue43/chunk_tiles192/README.md",)),
    Current("h100", "register_epilogue", "ws's dK / dV stored from registers, K / V freed at the tile's last wgmma "
            "(register_epilogue) off and on, two orders, FA grid D64 / D128 cells (issue 43)",
            ("results/h100/gluon/ab_issue43/register_epilogue/h100_register_epilogue_ab.parquet",),
            ("results/h100/gluon/ab_issue43/register_epilogue/README.md", H100_NOTES)),
    Current("h100", "mla_192_128", "ws at 192 / 128 (B2 H16 N4096 bf16): its block fields one at a time beside FA4, "
            "cuDNN and ws_two_pass, and Nsight Compute of ws and FA4's main kernels on the same lease (issues 43, 47)",
            ("results/h100/issue47/eb39e7f/h100_d192_fields_fa4.parquet",
             "results/h100/issue47/eb39e7f/h100_ncu_compare_192_128.parquet"),
            ("results/h100/issue47/eb39e7f/README.md", "results/h100/issue47/README.md", H100_NOTES)),
    Current("h100", "mla_sinks", "d_qk 192 / d_v 128 and learnable sinks, every design beside cuDNN and FA4 (issue 47)",
            ("results/h100/issue47/h100_mla_sink_designs.parquet", "results/h100/issue47/h100_mla_sink_fa4.parquet",
             "results/h100/issue47/h100_stages192_b2.parquet", "results/h100/issue47/h100_stages192_b1.parquet"),
            ("results/h100/issue47/README.md",)),
    Current("h100", "scheduled_chunks", "ws's causal tile chunks from a simulated list schedule off and on, FA grid "
            "causal cells and 192 / 128, two orders (issue 43)",
            ("results/h100/gluon/ab_issue43/scheduled_chunks/ab_fa_grid.parquet",
             "results/h100/gluon/ab_issue43/scheduled_chunks/ab_d96_gqa.parquet"),
            ("results/h100/gluon/ab_issue43/scheduled_chunks/README.md", H100_NOTES)),
    Current("h100", "stats_ahead", "ws's LSE / delta loads ahead of their wgmma waits (stats_ahead) off and on, two "
            "orders, D128 FA grid causal cells and D96 / D128 N4096 (issue 43)",
            ("results/h100/gluon/ab_issue43/stats_ahead/ab_stats_ahead.parquet",),
            ("results/h100/gluon/ab_issue43/stats_ahead/README.md", H100_NOTES)),
    Current("h100", "poly_exp", "ws's exp2 of P shared with an FMA-pipe cubic (poly_exp 0 / 2 / 4), two orders, FA grid "
            "D64 / D128 N1024 / N4096 (issue 43)",
            ("results/h100/gluon/ab_issue43/poly_exp/ab_poly_exp_2.parquet",
             "results/h100/gluon/ab_issue43/poly_exp/ab_poly_exp_4.parquet"),
            ("results/h100/gluon/ab_issue43/poly_exp/README.md", H100_NOTES)),
    Current("h100", "kv_buffers", "ws's K / V in one or two shared buffers over a persistent program's tiles "
            "(kv_buffers 1 / 2), two orders, D64 causal N1024-16384 and persistent non-causal (issue 43)",
            ("results/h100/gluon/ab_issue43/kv_buffers/ab_kv_causal.parquet",
             "results/h100/gluon/ab_issue43/kv_buffers/ab_kv_persistent_noncausal.parquet"),
            ("results/h100/gluon/ab_issue43/kv_buffers/README.md", H100_NOTES)),
    Current("h100", "d64_swap_causal_decomposed", "FA4's D64 tile under causal masking with persistent / split_masked "
            "on and off, and its neighbours (dq_first, named_handover, scheduled_chunks, stages, fp16), the tile for "
            "causal GQA, the non-causal tile persistent, two orders, N 1k / 4k / 16k (issue 43)",
            ("results/h100/gluon/ab_issue43/swap64_causal/ab_swap_decomposed.parquet",
             "results/h100/gluon/ab_issue43/swap64_causal/ab_swap_neighbours.parquet",
             "results/h100/gluon/ab_issue43/swap64_causal/ab_gqa_n4096.parquet",
             "results/h100/gluon/ab_issue43/swap64_causal/ab_gqa_kv48_fp16.parquet",
             "results/h100/gluon/ab_issue43/swap64_causal/ab_gqa_n1024_n16384.parquet",
             "results/h100/gluon/ab_issue43/swap64_causal/ab_persistent_d64_noncausal.parquet"),
            ("results/h100/gluon/ab_issue43/swap64_causal/README.md", H100_NOTES)),
    Current("h100", "d64_swap_causal", "FA4's D64 tile (swap AB, late_stats, named_handover) on ws's D64 causal "
            "defaults, two orders, FA grid causal cells (issue 43)",
            ("results/h100/gluon/ab_issue43/swap64/ab_swap_late_named_d64.parquet",),
            ("results/h100/gluon/ab_issue43/swap64/README.md", H100_NOTES)),
    Current("h100", "forward_lpt", "the Gluon forward's lpt order off and on (pp3 / pp2_lazy), FA grid causal cells, "
            "two orders (issue 42)",
            ("results/h100/forward_lpt/ab_forward_d64.parquet", "results/h100/forward_lpt/ab_forward_d128.parquet"),
            ("results/h100/forward_lpt/README.md", H100_NOTES)),
    Current("h100", "forward_persistent", "the persistent Gluon forward against pp3_lpt / pp2_lazy(_lpt), FA grid cells "
            "causal and not, N 1k-16k, two orders (issue 42)",
            tuple(f"results/h100/forward_persistent/{name}.parquet" for name in (
                "ab_pp3_persistent_d64", "ab_pp3_persistent_d64_long", "ab_pp2_lazy_persistent_d64",
                "ab_pp2_lazy_persistent_d64_n2048", "ab_pp2_lazy_persistent_d128", "ab_lpt_persistent_d128",
                "ab_pp3_persistent_d64_lease2", "ab_lpt_persistent_d128_lease2")),
            ("results/h100/forward_persistent/README.md", H100_NOTES)),
    Current("h100", "forward_persistent_spill_free", "the persistent Gluon forward without spills against pp3_lpt / "
            "pp2_lazy_lpt, D64 / D96 / D128 FA grid cells causal and not, two orders, four leases (issue 42)",
            tuple(f"results/h100/forward_persistent/spill_free/{name}.parquet" for name in (
                "ab_pp3_persistent_d64_lease1", "ab_pp3_persistent_d64_lease2", "ab_pp3_persistent_d64_lease4",
                "ab_pp2_lazy_persistent_d128_lease1", "ab_pp2_lazy_persistent_d128_lease2",
                "ab_pp2_lazy_persistent_d128_lease4", "ab_pp2_lazy_persistent_d96")),
            ("results/h100/forward_persistent/spill_free/README.md", H100_NOTES)),
    Current("h100", "forward_train", "timed=forward and train rows with the Gluon forward, cuDNN and FA4 (issue 42)",
            ("results/h100/forward_train/h100_forward_train_bf16.parquet",), ("results/h100/forward_train/README.md",)),
    Current("h100", "model_step_fa4", "a model step of ws, cuDNN, FA2 and FA4 at issue 42's four configs, eager and "
            "compiled (FA4's compiled step: a harness gap), fp32-truth gate",
            ("results/h100/model_step/fa4_498efb9/h100_model_step_fa4.parquet",),
            ("results/h100/model_step/fa4_498efb9/README.md", "results/h100/model_step/README.md")),
    Current("h100", "tune", "the tuner's studies and the exhaustive grid of one point (issue 12)",
            ("results/h100/tune/tune.parquet", "results/h100/tune/grid.parquet"),
            ("results/h100/tune/study_comparison.md",)),
    Current("h200", "fa_grid", "the FlashAttention papers' grid, every design and baseline, FA4 included",
            _pair("results/h200/fa4/h200_gluon_grid_{dtype}.parquet"),
            ("results/h200/fa4/README.md", "results/h200/gluon/README.md", H200_NOTES)),
    Current("h200", "large_d", "head dims 96, 192, 256 (B2 H16 N4096 bf16), FA4 included",
            ("results/h200/fa4/h200_gluon_large_d_bf16.parquet",), ("results/h200/fa4/README.md", H200_NOTES)),
    Current("h200", "ws_fa4_grid", "ws at 7cd7772's defaults (93f600e's) beside cuDNN and FA4 on the FA grid, causal "
            "and not, bf16 and fp16, backward (issue 43)",
            ("results/h200/fa4/7cd7772/h200_ws_fa4_grid_bf16_7cd7772.parquet",
             "results/h200/fa4/7cd7772/h200_ws_fa4_grid_fp16_7cd7772.parquet"),
            ("results/h200/fa4/7cd7772/README.md", "results/h200/fa4/8ee6346/README.md",
             "results/h200/fa4/8ac8aec/README.md", "results/h200/gluon/ab_issue43/d64_swap128/README.md", H200_NOTES)),
    Current("h200", "ws_fa4_gqa_large_d", "ws at 7cd7772's defaults beside cuDNN and FA4: issue 43's GQA cells (B4 "
            "N4096), D96 / 192 / 256 and 192 / 128 (B2 H16 N4096, ws_two_pass too), bf16, backward",
            ("results/h200/fa4/7cd7772/h200_ws_fa4_gqa_bf16_7cd7772.parquet",
             "results/h200/fa4/7cd7772/h200_ws_fa4_large_d_bf16_7cd7772.parquet",
             "results/h200/fa4/7cd7772/h200_ws_fa4_mla_192_128_bf16_7cd7772.parquet"),
            ("results/h200/fa4/7cd7772/README.md", "results/h200/fa4/8ee6346/README.md", H200_NOTES)),
    Current("h200", "ws_fa4_fwd_train", "ws at 7cd7772's defaults (the Gluon forward) beside cuDNN and FA4, timed=forward "
            "and train rows, FA grid bf16, N 1k / 4k / 16k (issue 42)",
            ("results/h200/forward_train/h200_forward_train_bf16_7cd7772.parquet",),
            ("results/h200/fa4/7cd7772/README.md", H200_NOTES)),
    Current("h200", "ws_fa4_causal", "ws at 7382f40's defaults (scheduled_chunks at D64 / D128 causal, the forward's "
            "lpt) beside cuDNN and FA4 on the FA grid's causal cells, bf16, forward / train / backward rows "
            "(issues 42, 43)",
            ("results/h200/fa4/7382f40/h200_causal_fwd_bwd_train.parquet",),
            ("results/h200/fa4/7382f40/README.md", "results/h200/fa4/eb39e7f/README.md", H200_NOTES)),
    Current("h200", "ws_fa4_train", "ws at 7382f40's defaults beside cuDNN and FA4, forward / train / backward rows, "
            "FA "
            "grid bf16 non-causal (the causal cells: ws_fa4_causal), and 192 / 128's backward (issues 42, 43, 47)",
            ("results/h200/fa4/7382f40/h200_noncausal_fwd_bwd_train.parquet",
             "results/h200/fa4/7382f40/h200_mla_192_128.parquet"),
            ("results/h200/fa4/7382f40/README.md", H200_NOTES)),
    Current("h200", "model_step_fa4", "a model step of ws, cuDNN and FA4 (compiled through variants/fa4_op.py) at "
            "issue 42's four configs, eager and compiled, fp32-truth gate",
            ("results/h200/model_step/fa4_9a9bfc6/h200_model_step_fa4.parquet",),
            ("results/h200/model_step/fa4_9a9bfc6/README.md", H200_NOTES)),
    Current("h200", "scheduled_chunks", "ws's causal tile chunks from a simulated list schedule off and on, FA grid "
            "causal cells and 192 / 128, two orders (issue 43)",
            ("results/h200/gluon/ab_issue43/scheduled_chunks/ab_fa_grid.parquet",
             "results/h200/gluon/ab_issue43/scheduled_chunks/ab_rerun.parquet"),
            ("results/h200/gluon/ab_issue43/scheduled_chunks/README.md", H200_NOTES)),
    Current("h200", "forward_lpt", "the Gluon forward's lpt order off and on (pp3 / pp2_lazy), FA grid causal cells, "
            "two orders (issue 42)",
            ("results/h200/forward_lpt/ab_forward_d64.parquet", "results/h200/forward_lpt/ab_forward_d128.parquet"),
            ("results/h200/forward_lpt/README.md", H200_NOTES)),
    Current("h200", "causal_defaults", "ws's causal defaults at eb39e7f (split_masked; at D128 also persistent, "
            "late_stats, named_handover, dq_first) against the old ones, FA grid causal cells, two orders (issue 43)",
            ("results/h200/gluon/ab_issue43/causal_defaults/h200_causal_defaults_ab.parquet",),
            ("results/h200/gluon/ab_issue43/causal_defaults/README.md", H200_NOTES)),
    Current("h200", "d64_swap128", "FA4's D64 tile (swap AB 128 x 128) with late_stats / named_handover / dq_first "
            "against ws's defaults, and D128 causal's sync combinations, two orders (issue 43)",
            ("results/h200/gluon/ab_issue43/d64_swap128/h200_d64_swap128_ab.parquet",
             "results/h200/gluon/ab_issue43/d64_swap128/h200_sync_combos.parquet"),
            ("results/h200/gluon/ab_issue43/d64_swap128/README.md", H200_NOTES)),
    Current("h200", "fa4_cases", "GQA, packed documents, a window and a softcap beside FA4 (bf16)",
            ("results/h200/fa4/h200_gluon_cases_bf16.parquet", "results/h200/fa4/h200_gluon_cases_window_softcap_bf16.parquet"),
            ("results/h200/fa4/README.md",)),
    Current("h200", "large_d_defaults", "head dims 96, 192, 256 at today's ws defaults (D96 split, D192 chunk tiles) "
            "beside cuDNN and FA4 (issue 43)", ("results/h200/fa4/h200_gluon_large_d_bf16_58374d5.parquet",),
            ("results/h200/fa4/README.md", H200_NOTES)),
    Current("h200", "host_cost", "host time of one eager forward + backward call (issue 44)",
            ("results/h200/host_cost/h200_host_cost_eb39e7f.parquet",), ("docs/host_cost.md", H200_NOTES)),
    Current("h200", "gqa_split", "GQA H32/Hkv4 D64 and H32/Hkv8 D128, ws's group_split 1 / 2 / 4 with fp32 or 16-bit "
            "partials beside FA4 and cuDNN, bf16 (issue 43)",
            ("results/h200/gluon/ab_issue43/group_split/h200_gluon_group_split_bf16.parquet",),
            ("results/h200/gluon/ab_issue43/README.md", H200_NOTES)),
    Current("h200", "late_stats", "ws's LSE / delta loaded at their use (late_stats) against the defaults, FA grid bf16 "
            "two orders, fp16 and GQA D128 once (issue 43)",
            ("results/h200/gluon/ab_issue43/late_stats/h200_late_stats_ab.parquet",
             "results/h200/gluon/ab_issue43/late_stats/h200_late_stats_d96.parquet"),
            ("results/h200/gluon/ab_issue43/late_stats/README.md", H200_NOTES)),
    Current("h200", "named_handover", "ws's dQ hand-over by a named barrier (named_handover) off and on, FA grid bf16, "
            "two orders, FA4 beside (issue 43)",
            ("results/h200/gluon/ab_issue43/named_handover/h200_named_handover_ab.parquet",),
            ("results/h200/gluon/ab_issue43/README.md", H200_NOTES)),
    Current("h200", "mla_sinks", "d_qk 192 / d_v 128 and learnable sinks beside cuDNN and FA4 (issue 47)",
            ("results/h200/issue47/h200_mla_sinks_fa4.parquet",), ("results/h200/issue47/README.md",)),
    Current("h200", "forward_train", "timed=forward and train rows with the Gluon forward, cuDNN and FA4, bf16 and fp16 "
            "(issue 42)", ("results/h200/forward_train/h200_forward_train.parquet",),
            ("results/h200/forward_train/README.md",)),
    Current("h200", "ws_tune", "two ws tuner studies with dead configs filtered (issue 43)",
            ("results/h200/tune/h200_tune_ws_d128_causal_n4096.parquet",
             "results/h200/tune/h200_tune_ws_d64_full_n4096.parquet"), ("results/h200/tune/README.md",)),
    Current("h200", "stock_grid", "the FA grid of the stock Triton designs and the baselines (issue 9)",
            ("results/h200/h200_issue9_grid.parquet",), (H200_NOTES,)),
    Current("h200", "stock_headdims", "the stock Triton designs at large head dims (issue 9)",
            ("results/h200/headdims/h200_issue9_headdims.parquet",), ("results/h200/headdims/README.md",)),
    Current("h200", "modifiers", "sliding windows, softcap, the forget gate at N16384 D128",
            ("results/h200/modifiers/h200_modifiers_16k_d128.parquet",), ("results/h200/modifiers/README.md",)),
    Current("h200", "seq_sweep", "B4 H16 bf16 over N 1024-16384, the first designs and baselines (issue 3)",
            ("results/h200/sweep_issue3.parquet",), ("docs/results.md", H200_NOTES)),
    Current("h200", "blocks", "a sweep=blocks search of two_pass, N4096 D128 causal (64 configs)",
            ("results/h200/blocks_two_pass_n4096_d128_causal.parquet",), (H200_NOTES,)),
    Current("h200x2", "launcher", "the two-GPU launcher check: jobs A, B, C merged",
            ("results/h200x2/merged.parquet",), ("docs/scaling.md",)),
    Current("h200x2", "scaling", "one sweep on 1 and 2 GPUs of one node, local_gpus, isolation on (issue 39)",
            ("results/h200x2/scaling/h200_scaling_rows_gpus1.parquet",
             "results/h200x2/scaling/h200_scaling_rows_gpus2.parquet", "results/h200x2/scaling/h200_scaling.parquet"),
            ("results/h200x2/scaling/README.md", "docs/scaling.md")),
    Current("h100x4", "scaling", "one sweep on 1, 2 and 4 GPUs of one node after the early job starts (issue 46)",
            ("results/h100x4/h100_scaling_rows.parquet", "results/h100x4/h100_scaling.parquet"),
            ("results/h100x4/README.md", "docs/scaling.md")),
    Current("h200x4", "scaling", "one sweep on 1, 2 and 4 GPUs of one node (wall time per GPU count)",
            ("results/h200x4/h200_scaling_rows.parquet", "results/h200x4/h200_scaling.parquet"),
            ("results/h200x4/README.md",)),
)


def gpus() -> list[str]:
    return list(dict.fromkeys(c.gpu for c in CURRENT))


def studies(gpu: str | None = None) -> list[str]:
    return list(dict.fromkeys(c.study for c in CURRENT if gpu in (None, c.gpu)))


def select(gpu: str | None = None, study: str | None = None) -> list[Current]:
    """The entries of ``gpu`` and ``study`` (None: any); KeyError naming the known values when one matches none."""
    if gpu is not None and gpu not in gpus():
        raise KeyError(f"no GPU folder {gpu!r} in the registry; known: {', '.join(gpus())}")
    if study is not None and study not in studies(gpu):
        raise KeyError(f"no study {study!r}{f' on {gpu}' if gpu else ''}; known: {', '.join(studies(gpu))}")
    return [c for c in CURRENT if gpu in (None, c.gpu) and study in (None, c.study)]


def paths(gpu: str, study: str) -> tuple[str, ...]:
    """The current tables of one study on one GPU folder."""
    return select(gpu, study)[0].paths
