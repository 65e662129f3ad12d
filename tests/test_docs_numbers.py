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
