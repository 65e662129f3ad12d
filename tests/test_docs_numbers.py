"""The docs' generated figures (issue 45): every marked block of README.md and docs/results.md is what
`python -m runners.docs_numbers` renders from its committed rows, and a block that differs is named."""
import pytest

from runners import docs_numbers as D


@pytest.mark.parametrize("doc", D.DOCS)
def test_doc_blocks_match_their_rows(doc, capsys):
    rc = D.main(["--check", str(D.REPO / doc)])
    assert rc == 0, f"{capsys.readouterr().out}run `python -m runners.docs_numbers` and commit the result"


def test_every_block_is_used_and_names_its_tables():
    """Each declared block is in a doc, and that doc names every table the block reads (a reader can find them)."""
    texts = {doc: (D.REPO / doc).read_text() for doc in D.DOCS}
    used = {m.group("name"): doc for doc, text in texts.items() for m in D.BLOCK.finditer(text)}
    assert set(used) == set(D.BLOCKS), (f"declared, not used: {set(D.BLOCKS) - set(used)}; "
                                        f"used, not declared: {set(used) - set(D.BLOCKS)}")
    for name, block in D.BLOCKS.items():
        for path in block.paths:
            assert (D.REPO / path).is_file(), f"block {name}: no table {path}"
            assert path.rsplit("/", 1)[-1] in texts[used[name]], f"{used[name]} does not name {path} (block {name})"


def fake(name):
    return {"table": "| a |\n|---|\n| 1.00 |", "phrase": "ws is fastest"}[name]


def test_a_tampered_block_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(D, "render", fake)
    good = ("intro\n\n<!-- numbers:table -->\n| a |\n|---|\n| 1.00 |\n<!-- /numbers -->\n\n"
            "So <!-- numbers:phrase -->ws is fastest<!-- /numbers -->.\n")
    doc = tmp_path / "doc.md"
    doc.write_text(good)
    assert D.main(["--check", str(doc)]) == 0
    doc.write_text(good.replace("1.00", "1.01").replace("ws is fastest", "ws is fast"))
    assert D.main(["--check", str(doc)]) == 1
    assert capsys.readouterr().out.splitlines() == [f"{doc}: block table differs from its rows",
                                                     f"{doc}: block phrase differs from its rows"]
    assert doc.read_text() != good  # --check rewrites nothing
    assert D.main([str(doc)]) == 0 and doc.read_text() == good  # without it, the blocks are rewritten


def test_unknown_or_unclosed_block_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "render", fake)
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- numbers:nope -->x<!-- /numbers -->\n")
    with pytest.raises(KeyError):
        D.update(doc.read_text(), D.render)
    doc.write_text("<!-- numbers:table -->\nx\n")
    assert D.main(["--check", str(doc)]) == 2


FAST = ("fast  (cache: cold)                          wall   169 s  rc 0   442 passed, 71 skipped, 264 deselected, "
        "1 warning in 161.09s (0:02:41) | NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, triton 3.6.0 | commit d7c2479")
FULL = ("full  (cache: 0 cached kernel files)         wall   575 s  rc 124 TIMED OUT after 575 s;  "
        "| NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, triton 3.6.0 | commit 968552f")


def tier_repo(tmp_path, tiers, fast_log):
    logs = tmp_path / "results/h100/test_tiers"
    logs.mkdir(parents=True)
    (logs / "tiers.log").write_text("\n".join(tiers) + "\n")
    (logs / "fast_cold.log").write_text(f"....s.. [100%]\n{fast_log}\n")
    (logs / "full_cold_timed_out.log").write_text("....F.. [ 45%]\n")
    return D.read_tiers((D.TIER_LOG,), tmp_path)


def test_tier_table_comes_from_the_last_logged_run(tmp_path):
    older = FAST.replace("169 s", "201 s").replace("442 passed", "440 passed")
    runs = tier_repo(tmp_path, [older, FULL, FAST], "442 passed, 71 skipped, 264 deselected, 1 warning in 161.09s")
    table = D.test_tiers(runs).splitlines()
    assert table[2] == ('| `-m "not slow"`, cold Triton cache | GPU | 169 s on an NVIDIA H100 80GB HBM3 '
                        "(commit d7c2479): 442 passed, 71 skipped, 264 deselected "
                        "([log](results/h100/test_tiers/fast_cold.log), "
                        "[tiers.log](results/h100/test_tiers/tiers.log)) |")
    assert table[3].startswith("| full suite, one process, cold Triton cache | GPU | over 575 s on an NVIDIA H100 80GB "
                               "HBM3 (commit 968552f): stopped at the script's limit")
    assert table[4] == D.CI_ROW and "no committed log" in D.CI_ROW and len(table) == 5


def test_tier_log_and_its_pytest_output_must_agree(tmp_path):
    runs = tier_repo(tmp_path, [FAST], "441 passed, 1 failed, 71 skipped, 264 deselected in 161.09s")
    with pytest.raises(ValueError, match="fast_cold.log says '441 passed, 1 failed"):
        D.test_tiers(runs)


def test_a_line_that_is_not_a_run_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="tiers.log:2: not a test-tier line"):
        tier_repo(tmp_path, [FAST, "fast 169 s 442 passed"], "")
