"""The result folders the docs' plot, report and regression commands name exist (issue 29: they named
results/h100-sxm, which the repository never had). Synopsis lines count too: `results=results/<gpu>` must be a
folder a reader can pass as written."""
import re

import pytest

from runners.point import env

PAGES = ["README.md", "docs/plots.md", "docs/regression.md", "docs/tuning.md", "docs/results.md"]
KEYS = ("results", "baseline", "candidate", "grid")


def named_paths():
    found = []
    for page in PAGES:
        text = (env.REPO / page).read_text()
        for n, line in enumerate(text.split("\n"), 1):
            if "python -m " not in line:
                continue
            for key, value in re.findall(r"\b(" + "|".join(KEYS) + r")=(results/[^\s\]`'\"]*)", line):
                if not re.search(r"[<>…]", value):
                    found.append((f"{page}:{n}", key, value))
    return found


PATHS = named_paths()


def test_the_docs_name_result_folders():
    assert any(page.startswith("docs/plots.md") for page, _, _ in PATHS)
    assert any(page.startswith("docs/regression.md") for page, _, _ in PATHS)


@pytest.mark.parametrize("where, key, value", PATHS, ids=[f"{w} {k}={v}" for w, k, v in PATHS])
def test_named_result_folder_exists(where, key, value):
    assert (env.REPO / value).exists(), f"{where}: {key}={value} does not exist"
