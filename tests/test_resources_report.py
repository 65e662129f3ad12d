"""plots.resources and the report's resources section on FABRICATED explanation columns (plots._synthetic):
kernel shares, compiled resources, the registers/spills-vs-TFLOPS view of a block search; wrong and failed
configs are never drawn; tables without the columns get a note, not an error."""
import pandas as pd
import pytest

from plots import _synthetic as S
from plots import report, resources

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def explained(tmp_path):
    df = pd.concat([S.with_explanation(S.block_sweep()), S.with_explanation(S.table())], ignore_index=True)
    return S.write(df, tmp_path / "in")


def test_report_has_a_resources_section_and_the_registers_view(explained, tmp_path):
    assert report.main([f"results={explained}", f"out={tmp_path / 'out'}"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    section = md[md.index("## Resources"):md.index("## Plots")]
    assert "_dkdv_kernel 62% · _dq_kernel 33% · _delta_kernel 5%" in section and "97%" in section
    assert "regs," in section and "spills" in section and "/SM (regs)" in section
    assert "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel 90%" in section  # baselines: their CUDA kernels
    figures = sorted((tmp_path / "out").glob("resources_*.png"))
    assert len(figures) == 4  # atomic and two_pass block searches, two shapes each
    assert all(p.read_bytes()[:8] == PNG and p.stat().st_size > 0 for p in figures)
    assert all(f"]({p.name})" in md for p in figures)


def test_registers_view_draws_only_correct_results(explained, tmp_path, monkeypatch):
    titles = []
    real_save = resources.C.save

    def save(fig, out, stem, svg):
        titles.append(fig._suptitle.get_text())
        return real_save(fig, out, stem, svg)

    monkeypatch.setattr(resources.C, "save", save)
    paths = resources.draw(resources.T.load(explained), tmp_path / "out", variant="two_pass")
    assert len(paths) == 2
    # 18 configs per shape: 2 hit 'resources' and 1 has wrong gradients (with timings): 15 are drawn
    assert all("(15 configs)" in t for t in titles)


def test_tables_without_explanation_columns(tmp_path):
    S.write(S.table(), tmp_path / "in")
    assert report.main([f"results={tmp_path / 'in'}", f"out={tmp_path / 'out'}"]) == 0
    assert "no per-kernel data" in (tmp_path / "out" / "report.md").read_text()
    assert resources.main([f"results={tmp_path / 'in'}", f"out={tmp_path / 'out'}"]) == 2
