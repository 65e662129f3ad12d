"""CI: every stock design's default blocks compile for every architecture of runners/compile/arch_limits.py, on the CPU
with Triton's bundled ptxas (runners.compiled_table; docs/compile_check.md). Trimmed to D128, bf16, not causal:
one subprocess (the compiler, not this process's interpreter), about a minute on 2 cores with a cold Triton cache.

A default must fit (status ok), or the design must say why it cannot run there (`unsupported`, only where
runners.compile.resources.unsupported_reason refuses: the design's arch_reason or problem_reason); a rule marked
`source: compile_checked` also promises no spills (in the kernels its blocks shape: not the shared delta kernel,
runners.compile.arch_defaults.shared_kernels)."""
import csv
import json
import os
import subprocess
import sys

import pytest

from runners.point import env
from runners.compile.arch_limits import ARCHS
from tests.test_compile_check import needs_ptxas
from variants.block_defaults import load_table


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("compiled") / "rows.csv"
    run = subprocess.run([sys.executable, "-m", "runners.compiled_table", "--head-dims", "128", "--dtypes", "bf16",
                          "--causal", "false", "--out", str(out)], cwd=env.REPO, capture_output=True, text=True,
                         timeout=900, env={**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    return list(csv.DictReader(open(out)))


def test_every_architecture_has_its_own_rules():
    table = load_table()
    for arch in ARCHS.values():
        assert arch.table_key in table, f"conf/block_defaults.yaml has no {arch.table_key!r} section ({arch.name})"
    sources = {rule.get("source", "measured") for key, section in table.items() for rules in section.values()
               for rule in rules}
    assert sources <= {"measured", "compile_checked"}, sources


@needs_ptxas
def test_default_blocks_fit_every_architecture(rows):
    from runners.compile.arch_defaults import shared_kernels, stock_designs
    from runners.compile.resources import probe_problem, unsupported_reason
    from variants import get

    assert {(r["arch"], r["variant"]) for r in rows} == {(a, v) for a in ARCHS for v in stock_designs()}
    for row in rows:
        where = f"{row['arch']} {row['variant']} {row['kernel']} {row['blocks']}"
        if row["status"].startswith("unsupported"):
            impl = get(row["variant"])
            problem = probe_problem(int(row["head_dim"]), row["dtype"], row["causal"] == "True", int(row["heads"]),
                                    int(row["kv_heads"]))
            blocks = impl.Blocks.from_dict(json.loads(row["blocks"]))
            reason = unsupported_reason(impl, problem, ARCHS[row["arch"]], blocks)
            assert row["status"] == f"unsupported: {reason}", where
            continue
        assert row["status"] == "ok", f"{where}: {row['status']}"
        assert not row["blocks_source"].endswith("(any)"), where
        if row["blocks_source"] == "compile_checked" and row["kernel"] not in shared_kernels():
            assert int(row["spill_store_bytes"]) == 0, f"{where}: {row['spill_store_bytes']} B of spill stores"


def test_the_search_shrinks_only_the_failing_kernels_fields():
    from runners.compile.arch_defaults import failing, runnable_start, shrink
    start = {"BLOCK_M1": 64, "BLOCK_N1": 64, "num_warps1": 4, "num_stages1": 2,
             "BLOCK_M2": 128, "BLOCK_N2": 64, "num_warps2": 8, "num_stages2": 3}
    smem = {"kernel": "_dq_kernel", "status": "OutOfResources: shared memory, Required: 1, Hardware limit: 0",
            "spill_store_bytes": 0}
    assert shrink("two_pass", start, smem) == {**start, "num_stages2": 2}
    spills = {"kernel": "_dkdv_kernel", "status": "ok", "spill_store_bytes": 8}
    assert shrink("two_pass", start, spills) == {**start, "num_warps1": 8}
    assert shrink("two_pass", {**start, "num_warps1": 8}, spills) == {**start, "num_warps1": 8, "BLOCK_M1": 32}
    delta = {"kernel": "_delta_kernel", "status": "ok", "spill_store_bytes": 32}
    assert failing([delta]) is None and failing([delta, spills]) == spills  # no block changes the delta kernel
    tma = runnable_start("atomic_tma", {"tma_load": True}, 80)
    assert tma["tma_load"] is False and tma["tma_reduce"] is False
    assert runnable_start("atomic_tma", {"tma_load": True}, 90)["tma_load"] is True
    assert runnable_start("ws", {}, 80) is None
