"""runners.regress on compiled-resources tables (runners.compiled_table's columns): a planted spill, a config that
no longer fits and registers up past the margin count; the architecture x design view. Small hand-made tables,
no compiler, in-process main()."""
import json

import pandas as pd

from runners.regression import measured as regress
from runners.compile.resources import COLUMNS
from runners.regression.compiled import arch_design_view, compare, is_compiled_table, load

BLOCKS = json.dumps({"BLOCK_M1": 64, "BLOCK_N1": 64})


def _row(arch, variant, kernel, n_regs, spills=0, smem=65536, status="ok", commit="a" * 40, **extra):
    row = {c: None for c in COLUMNS}
    row.update(arch=arch, variant=variant, head_dim=128, dtype="bf16", causal=False, heads=16, kv_heads=16,
               blocks=BLOCKS, blocks_source="measured", kernel=kernel, num_warps=4, num_stages=2, n_regs=n_regs,
               spill_store_bytes=spills, spill_load_bytes=spills, smem_bytes=smem, programs_per_sm=1,
               limiter="regs", status=status, commit=commit, dirty=False, timestamp="2026-01-01T00:00:00+00:00",
               **extra)
    return row


def _tables():
    base = pd.DataFrame([_row("sm80", "two_pass", "_dkdv_kernel", 200), _row("sm80", "two_pass", "_dq_kernel", 180),
                         _row("sm90", "two_pass", "_dkdv_kernel", 210), _row("sm90", "atomic", "_dkdv_kernel", 230),
                         _row("sm86", "ws", "_ws_kernel", None, status="unsupported: ws needs sm90")])
    cand = base.copy()
    cand["commit"], cand["timestamp"] = "b" * 40, "2026-02-01T00:00:00+00:00"
    return base, cand


def _write(tmp_path, base, cand):
    base.to_csv(tmp_path / "base.csv", index=False)
    cand.to_csv(tmp_path / "cand.csv", index=False)
    return [f"baseline={tmp_path / 'base.csv'}", f"candidate={tmp_path / 'cand.csv'}"]


def test_planted_spill_regression_is_flagged(tmp_path, capsys):
    base, cand = _tables()
    assert regress.main(_write(tmp_path, base, cand)) == 0  # identical: nothing counts
    assert "no regressions" in capsys.readouterr().out
    sel = (cand["arch"] == "sm80") & (cand["kernel"] == "_dq_kernel")
    cand.loc[sel, ["n_regs", "spill_store_bytes", "spill_load_bytes"]] = [255, 48, 48]  # the planted spill
    assert regress.main([*_write(tmp_path, base, cand), f"out={tmp_path / 'r.md'}"]) == 1
    out = capsys.readouterr().out
    spill_lines = [line for line in out.splitlines() if line.lstrip().startswith("SPILLS")]
    assert len(spill_lines) == 1 and "sm80" in spill_lines[0] and "_dq_kernel" in spill_lines[0], out
    assert "48 B spills" in spill_lines[0] and "REGRESSED: 1 kernel(s)" in out
    text = (tmp_path / "r.md").read_text()
    assert "## Architecture x design" in text and "| sm80 | SPILLS 1 |" in text


def test_no_longer_fits_and_registers_past_the_margin_count():
    base, cand = _tables()
    base, cand = load_frame(base), load_frame(cand)
    fits = (cand["arch"] == "sm90") & (cand["variant"] == "atomic")
    cand.loc[fits, "status"] = "OutOfResources: shared memory, Required: 240000, Hardware limit: 232448"
    cand.loc[(cand["arch"] == "sm90") & (cand["variant"] == "two_pass"), "n_regs"] = 216  # +6: within 8
    cand.loc[(cand["arch"] == "sm80") & (cand["kernel"] == "_dkdv_kernel"), "n_regs"] = 212  # +12
    table = compare(base, cand, regs_margin=8)
    verdicts = dict(zip(table["arch"] + "/" + table["variant"] + "/" + table["kernel"], table["verdict"]))
    assert verdicts["sm90/atomic/_dkdv_kernel"] == "BROKE"
    assert verdicts["sm80/two_pass/_dkdv_kernel"] == "REGS UP"
    assert verdicts["sm90/two_pass/_dkdv_kernel"] == "≈" and verdicts["sm86/ws/_ws_kernel"] == "still failing"
    assert compare(base, cand, regs_margin=16)["verdict"].value_counts().get("REGS UP", 0) == 0
    view = arch_design_view(table).set_index("arch")
    assert view.loc["sm90", "atomic"] == "BROKE 1" and view.loc["sm86", "ws"] == "unsupported"
    assert view.loc["sm80", "two_pass"] == "REGS UP 1" and view.loc["sm80", "atomic"] == "-"


def load_frame(frame):
    return frame.assign(launch=0)


def test_commit_mode_and_detection(tmp_path, capsys):
    base, cand = _tables()
    cand.loc[cand["kernel"] == "_dq_kernel", "spill_store_bytes"] = 8
    folder = tmp_path / "compiled"
    folder.mkdir()
    base.to_csv(folder / "compiled_aaaaaaa.csv", index=False)
    cand.to_csv(folder / "compiled_bbbbbbb.csv", index=False)
    assert is_compiled_table(folder) and len(load(folder)) == 10
    assert regress.main(["baseline=aaaaaaa", f"results={folder}"]) == 1
    assert "newest other commit" in capsys.readouterr().out
    assert regress.main(["baseline=bbbbbbb", f"results={folder}"]) == 0  # the other one: fewer spills
    assert regress.main(["baseline=ccccccc", f"results={folder}"]) == 2


def test_no_kernel_in_both_tables_is_one_line_exit_2(tmp_path, capsys):
    """Compiled tables that share no kernel compare nothing: one line saying so, exit 2, never "no regressions"."""
    base, cand = _tables()
    cand["arch"] = "sm120"  # every kernel on another architecture
    assert regress.main(_write(tmp_path, base, cand)) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert "no regressions" not in captured.out and len(err) == 1 and "no kernel compared" in err[0]
