"""The test-tier log that `scripts/gpu_test_tiers.sh` appends to (``tiers.log``), as rows. One line per run:

    fast  (cache: cold)   wall   169 s  rc 0   442 passed, 71 skipped, ... in 161.09s (0:02:41) \
        | NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, triton 3.6.0 | commit d7c2479        (one line)

A run that hit the script's limit says ``TIMED OUT after 575 s;`` where pytest's summary would be.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

LINE = re.compile(r"^(?P<tier>\S.*?)\s+\(cache: (?P<cache>[^)]*)\)\s+wall\s+(?P<wall_s>\d+) s\s+rc (?P<rc>\d+)\s+"
                  r"(?P<summary>.*?) \| (?P<env>.*?) \| commit (?P<commit>\S+)\s*$")
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?)\b")


def counts(summary: str) -> str:
    """'442 passed, 71 skipped, 264 deselected': pytest's counts without its warnings and its own time."""
    return ", ".join(f"{n} {what}" for n, what in COUNTS.findall(summary))


def parse(text: str, source: str = "") -> pd.DataFrame:
    """One row per run (tier, cache, wall_s, rc, timed_out, counts, gpu, commit, source); a line that is not a run
    is a ValueError naming it, so a changed format cannot pass as no runs."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = LINE.match(line)
        if not m:
            raise ValueError(f"{source or 'tiers.log'}:{n}: not a test-tier line: {line[:60]!r}")
        rows.append({"tier": m["tier"].strip(), "cache": m["cache"], "wall_s": int(m["wall_s"]), "rc": int(m["rc"]),
                     "timed_out": m["summary"].startswith("TIMED OUT"), "counts": counts(m["summary"]),
                     "gpu": m["env"].split(",")[0].strip(), "commit": m["commit"], "source": source})
    return pd.DataFrame(rows)


def latest(paths, repo: Path) -> pd.DataFrame:
    """The rows of every log, the last run of each tier kept (the script appends, so a log may repeat a run)."""
    df = pd.concat([parse((repo / p).read_text(), p) for p in paths], ignore_index=True)
    return df.drop_duplicates("tier", keep="last").reset_index(drop=True)
