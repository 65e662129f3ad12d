"""Rows on disk when the disk fills (issue 39): a row write that fails leaves no temporary file."""
import os

import pandas as pd
import pytest

from runners.point import env
from runners.tables import results

pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")

ROW = {"config_key": "k", "variant": "two_pass", "status": "ok", "correct": True, "gpu_name": "g", "commit": "c",
       "timestamp": "2026-01-01T00:00:00"}


def test_a_failed_row_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full_disk(df, path, **kwargs):
        with open(path, "wb") as f:  # half a row on disk, then the disk is full
            f.write(b"PAR1 half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full_disk)
    with pytest.raises(OSError, match="No space left"):
        results.write_row(ROW, tmp_path / "rows", 0, "abc")
    assert os.listdir(tmp_path / "rows") == []
