"""runners.compile_check: compiled sm90 resources of two_pass's kernels, on a CPU (Triton's bundled ptxas).

Each compile takes seconds, so the whole file compiles four kernels: the three of a small two_pass config and
one dQ kernel whose shared memory cannot fit. The CLI runs in a subprocess: it needs @triton.jit without the
interpreter, which this test process (conftest: TRITON_INTERPRET=1 on CPU) already decided.
"""
import csv
import os
import subprocess
import sys

import pytest

from runners.point import env
from runners.compile.resources import MAX_SMEM_PER_BLOCK, parse_blocks, parse_ptxas_log


def _ptxas_present() -> bool:
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        return os.path.exists(get_ptxas(90).path)
    except Exception:  # noqa: BLE001
        return False


needs_ptxas = pytest.mark.skipif(not _ptxas_present(), reason="Triton's bundled ptxas is not present")


def cli(*args, tmp_path=None):
    out = tmp_path / "rows.csv" if tmp_path is not None else None
    run = subprocess.run([sys.executable, "-m", "runners.compile_check", *args, *(["--out", str(out)] if out else [])],
                         cwd=env.REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"})
    rows = list(csv.DictReader(open(out))) if out is not None and out.exists() else []
    return run, rows


def test_parse_blocks_and_ptxas_log():
    assert parse_blocks("BLOCK_M1=64, num_warps1=8,prescale=true") == {"BLOCK_M1": 64, "num_warps1": 8, "prescale": True}
    assert parse_blocks('{"BLOCK_N2": 32}') == {"BLOCK_N2": 32}
    log = ("ptxas info    : Used 168 registers, used 1 barriers, 400 bytes cmem[0]\n"
           "ptxas info    : Function properties for k\n    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads")
    assert parse_ptxas_log(log) == {"n_regs": 168, "spill_store_bytes": 8, "spill_load_bytes": 4, "ptxas_advice": ""}
    serialized = ("ptxas-blackwell warning : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
                  "serialized due to the presence of Extern calls\n" + log)
    assert parse_ptxas_log(serialized)["ptxas_advice"].startswith("(C7515) Potential Performance Loss: wgmma")


@needs_ptxas
def test_two_pass_small_config_compiles_for_sm90(tmp_path):
    run, rows = cli("--variant", "two_pass", "--head-dim", "64", "--causal",
                    "--blocks", "BLOCK_M1=32,BLOCK_N1=64,BLOCK_M2=64,BLOCK_N2=32", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert [r["kernel"] for r in rows] == ["_delta_kernel", "_dkdv_kernel", "_dq_kernel"], run.stdout
    for row in rows:
        assert row["status"] == "ok", row
        assert int(row["n_regs"]) > 0 and int(row["smem_bytes"]) >= 0 and int(row["programs_per_sm"]) >= 1, row
    assert all(int(r["smem_bytes"]) > 0 for r in rows if r["kernel"] != "_delta_kernel")  # dot operands staged
    assert "programs/SM" in run.stdout


@needs_ptxas
def test_shared_memory_that_cannot_fit_is_a_reason_not_a_crash(tmp_path):
    run, rows = cli("--variant", "two_pass", "--head-dim", "256", "--kernels", "_dq_kernel",
                    "--blocks", "BLOCK_M2=16,BLOCK_N2=256,num_stages2=4,num_warps2=8", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    (row,) = rows
    assert int(row["smem_bytes"]) > MAX_SMEM_PER_BLOCK
    assert row["status"].startswith("OutOfResources: shared memory"), row
    assert "OutOfResources: shared memory" in run.stdout


def test_bad_variant_exits_2_with_one_line():
    run, _ = cli("--variant", "no_such_design")
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "no_such_design" in run.stderr, run.stderr


def test_bad_arch_exits_2_with_one_line():
    run, _ = cli("--arch", "sm90,sm70")
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [
        "compile_check: --arch: unknown architecture 'sm70'; known: sm80, sm86, sm89, sm90, sm100, sm120"]


def test_arch_names_parse_and_every_limit_is_set():
    from runners.compile.arch_limits import ARCHS, parse_archs
    assert [a.name for a in parse_archs("sm80, 9.0,120,sm80")] == ["sm80", "sm90", "sm120"]
    assert ARCHS["sm120"].table_key == "12.0" and ARCHS["sm90"].table_key == "9.0"
    for arch in ARCHS.values():
        assert arch.smem_per_block <= arch.smem_per_sm and arch.max_warps_per_sm * 32 >= arch.max_threads_per_block


def test_a_design_for_one_architecture_is_unsupported_elsewhere_without_compiling(tmp_path):
    run, rows = cli("--variant", "ws", "--arch", "sm80,sm120", "--head-dim", "128", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert {r["arch"] for r in rows} == {"sm80", "sm120"} and rows, run.stdout
    for row in rows:
        assert row["status"].startswith("unsupported: ws needs sm90") and not row["n_regs"], row
    assert "unsupported: ws needs sm90" in run.stdout


def test_a_problem_the_design_does_not_cover_is_unsupported_with_its_own_reason(tmp_path):
    """ws covers head dims 64, 96, 128, 192, 256 (variants/ws.py): at 80 on sm90 its rows say so (Ws.problem_reason,
    the rule its `supports` applies on a GPU), not a compile of kernels it never launches there."""
    from variants import get
    from variants.problem import DTYPES, Problem
    reason = get("ws").problem_reason(Problem(1, 256, 256, 16, 16, 80, False, DTYPES["bf16"], "cpu"))
    run, rows = cli("--variant", "ws", "--arch", "sm90", "--head-dim", "80", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert rows and reason, run.stdout
    for row in rows:
        assert row["status"] == f"unsupported: {reason}" and not row["n_regs"], row


@needs_ptxas
def test_score_modifiers_pick_their_block_rule_and_name_themselves(tmp_path):
    """--softcap / --window / --gate compile the modified kernels (issue 24) with the modified problem's default blocks:
    ws at D64 with softcap takes its `softcap: true` rule (64 x 128 swap-AB tiles), and the rows say which modifiers."""
    run, rows = cli("--variant", "ws", "--head-dim", "64", "--causal", "--softcap", "30", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert rows and all(r["modifiers"] == "softcap=30" for r in rows), run.stdout
    ws_row = next(r for r in rows if r["kernel"] == "_ws_backward_kernel")
    assert '"BLOCK_M":64' in ws_row["blocks"] and '"swap_ab":true' in ws_row["blocks"], ws_row
    assert ws_row["status"] == "ok" and int(ws_row["spill_store_bytes"]) == 0, ws_row


def test_a_bad_modifier_exits_2_with_one_line():
    run, _ = cli("--variant", "two_pass", "--gate")  # a gate needs causal
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "causal" in run.stderr, run.stderr


def test_a_kernel_the_launcher_cannot_take_is_an_error_not_a_pass(monkeypatch):
    """Triton 3.6's CUDA launcher asserts on a host tensor descriptor inside a tuple argument, after the kernel
    compiled; check_launcher builds that argument list on the CPU (whichever launcher this Triton has) and says so in
    one line. Here the launcher's expansion is made to fail as 3.6's does."""
    from types import SimpleNamespace

    from triton.backends.nvidia import driver

    from runners.compile.resources import check_launcher

    def refuse(*args, **kwargs):
        raise AssertionError()

    monkeypatch.setattr(driver, "expand_signature", refuse, raising=False)
    monkeypatch.setattr(driver, "make_launcher", refuse, raising=False)
    src = SimpleNamespace(fn=SimpleNamespace(arg_names=["descs"]), constants={},
                          signature={"descs": "(tensordesc<bf16[64, 64]>)"})
    with pytest.raises(RuntimeError, match="launcher cannot take this kernel's arguments"):
        check_launcher(src, SimpleNamespace(metadata=SimpleNamespace(tensordesc_meta=None)))


def test_a_value_head_dim_of_its_own_is_named_and_refused_with_the_reason(tmp_path):
    """--head-dim-v (issue 47) reaches the problem: atomic_tma, which sizes V by D, is `unsupported` with its reason
    and nothing compiles; the rows name the value head dim."""
    run, rows = cli("--variant", "atomic_tma", "--head-dim", "64", "--head-dim-v", "32", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert rows and "D64/32" in run.stdout, run.stdout
    for row in rows:
        assert row["modifiers"] == "dv=32" and not row["n_regs"], row
        assert row["status"] == ("unsupported: atomic_tma does not implement a value head dim of its own (head_dim 64, "
                                 "head_dim_v 32)"), row


def test_block_rules_bound_the_wider_head_dim():
    """A rule's head_dim_max bounds max(D, Dv): ws at 64 / 128 takes D128's swap-AB tiles (D64's 128 x 128 tiles need
    242 KB of shared memory with dO and V 128 wide), at 192 / 128 D192's with a second Q / dO stage (a `head_dim` +
    `head_dim_v` rule; at 192 / 192 two stages fit only with chunk tiles, at 256 one), at 128 / 64 D128's; D96 alone
    (`head_dim: 96`) adds head_dim_split to D128's tiles, without D128 causal's persistent and dq_first."""
    from runners.compile.resources import probe_problem
    from variants.block_defaults import default_block_rule

    def rule(d, dv):
        return default_block_rule("ws", probe_problem(d, "bf16", True, 2, 2, {"head_dim_v": dv}), arch="sm90")["blocks"]
    assert probe_problem(64, "bf16", True, 2, 2, {"head_dim_v": 128}).value_dim == 128
    assert rule(64, 128) == rule(128, 128) == rule(128, 64) != rule(64, 64)
    assert rule(192, 128)["num_stages"] == 2 and rule(256, 256)["num_stages"] == 1
    # 128 + 64 column tiles: two stages fit there (scheduled_chunks: measured at 192 / 128, D96 and D128 causal, not
    # at 192 / 192)
    unmeasured = ("scheduled_chunks",)
    assert rule(192, 192) == {**{k: v for k, v in rule(192, 128).items() if k not in unmeasured}, "chunk_tiles": True}
    # D128 causal: persistent, late_stats, named_handover, dq_first (faster together with split_masked, which joins
    # them from N4096); D96 causal: late_stats and named_handover without persistent and dq_first (measured slower)
    d128 = rule(128, 128)
    assert d128["persistent"] and d128["dq_first"] and "head_dim_split" not in d128
    assert rule(96, 96) == {**{k: v for k, v in d128.items() if k not in ("persistent", "dq_first")},
                            "head_dim_split": True}
    assert rule(96, 128) == rule(128, 128)  # the exact keys name 96 / 96 (and 192 / 128), not every D up to 128
