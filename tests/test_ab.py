"""runners.ab: one block field's two values in both orders, each pass in its own results dir, one flat table and
the ratio per cell and pass (CPU, the Triton interpreter)."""
import os
import subprocess
import sys

import pandas as pd
import pytest

from runners.point import env

pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")

CELL = "seq=64 batch=1 heads=2 head_dim=32 dtype=fp16"


def run_ab(*args, cwd=env.REPO):
    return subprocess.run([sys.executable, "-m", "runners.ab", *args], cwd=cwd, text=True, capture_output=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)


def test_a_block_field_may_be_named_with_its_sweep_prefix():
    from runners import ab
    assert ab.field_name("blocks.group_split") == ab.field_name("group_split") == "group_split"
    assert ab.override_key(ab.field_name("blocks.group_split")) == "blocks.group_split"
    assert ab.field_name("forward") == "forward" and ab.override_key("forward") == "forward"


def test_both_orders_in_their_own_dirs_and_one_table(tmp_path):
    run = run_ab("variant=two_pass", "field=num_stages1", "values=2,3", f"cells={CELL}; {CELL.replace('32', '16')}",
                 f"out={tmp_path}")
    assert run.returncode == 0, run.stdout + run.stderr
    rows = pd.read_parquet(tmp_path / "ab_num_stages1.parquet")
    assert len(rows) == 8 and set(rows["status"]) == {"ok"}
    assert sorted(rows.groupby(["ab_pass", "ab_value"]).size().items()) == [
        (("a", "2"), 2), (("a", "3"), 2), (("b", "2"), 2), (("b", "3"), 2)]
    # each pass wrote under its own dir, so pass b measured every point again (a sweep skips rows it finds)
    assert {p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*.parquet") if p.parent != tmp_path} == {
        "pass_a", "pass_b"}
    # pass a measured 2 before 3, pass b 3 before 2
    for name, first in (("a", "2"), ("b", "3")):
        part = rows[(rows["ab_pass"] == name) & (rows["head_dim"] == 32)].sort_values("timestamp")
        assert part["ab_value"].iloc[0] == first
    assert "a/b" in run.stdout and "0 not ok" in run.stdout


def test_two_override_sets_in_both_orders(tmp_path):
    """a= / b=: two sets of overrides (a left out: the defaults), each set's sweep a process and a results dir of its own,
    A first in pass a and B first in pass b; ab_value says which set wrote a row."""
    run = run_ab("variant=two_pass", "b=blocks.num_stages1=3 blocks.num_warps1=2", f"cells={CELL}",
                 f"out={tmp_path}")
    assert run.returncode == 0, run.stdout + run.stderr
    rows = pd.read_parquet(tmp_path / "ab_sets.parquet")
    assert len(rows) == 4 and set(rows["status"]) == {"ok"}
    assert sorted(rows.groupby(["ab_pass", "ab_value"]).size().items()) == [
        (("a", "A"), 1), (("a", "B"), 1), (("b", "A"), 1), (("b", "B"), 1)]
    b_rows = rows[rows["ab_value"] == "B"]
    assert set(b_rows["num_stages1"]) == {3} and set(b_rows["num_warps1"]) == {2}
    assert 3 not in set(rows.loc[rows["ab_value"] == "A", "num_stages1"]) or \
        2 not in set(rows.loc[rows["ab_value"] == "A", "num_warps1"])  # A ran the defaults, not B's set
    for name, first in (("a", "A"), ("b", "B")):
        part = rows[rows["ab_pass"] == name].sort_values("timestamp")
        assert part["ab_value"].iloc[0] == first
    assert {p.relative_to(tmp_path).parts[:2] for p in tmp_path.rglob("*.parquet") if p.parent != tmp_path} == {
        ("pass_a", "A"), ("pass_a", "B"), ("pass_b", "A"), ("pass_b", "B")}


def test_three_labelled_sets_forward_then_reversed(tmp_path):
    """sets=: labelled override sets (an empty one: the defaults), pass a in the given order and pass b reversed,
    each in its own dir; the table has ms(first) / ms(set) for every other set."""
    run = run_ab("variant=two_pass", "sets=base: | s3: blocks.num_stages1=3 | w2: blocks.num_warps1=2",
                 f"cells={CELL}", f"out={tmp_path}")
    assert run.returncode == 0, run.stdout + run.stderr
    rows = pd.read_parquet(tmp_path / "ab_sets.parquet")
    assert len(rows) == 6 and set(rows["status"]) == {"ok"}
    assert set(rows.loc[rows["ab_value"] == "s3", "num_stages1"]) == {3}
    assert set(rows.loc[rows["ab_value"] == "w2", "num_warps1"]) == {2}
    for name, order in (("a", ["base", "s3", "w2"]), ("b", ["w2", "s3", "base"])):
        assert list(rows[rows["ab_pass"] == name].sort_values("timestamp")["ab_value"]) == order
    assert "base/s3" in run.stdout and "base/w2" in run.stdout and "0 not ok" in run.stdout


@pytest.mark.parametrize("args, message", [
    (["field=split_masked", "a=blocks.swap_ab=true", "cells=seq=64"], "not both"),
    (["a=blocks.swap_ab=true", "b=blocks.swap_ab=true", "cells=seq=64"], "are the same overrides"),
    (["values=true,false"], "field= names the block field"),
    (["field=split_masked", "values=true"], "two different values"),
    (["field=split_masked"], "cells= names the sweep cells"),
    (["field=split_masked", "cells=seq=64", "bogus=1"], "unknown key 'bogus'"),
    (["sets=base: | base: blocks.swap_ab=true", "cells=seq=64"], "used twice"),
    (["sets=base:", "cells=seq=64"], "two sets or more"),
    (["sets=base: | swap blocks.swap_ab=true", "cells=seq=64"], "LABEL: overrides"),
    (["sets=x: blocks.swap_ab=true | y: blocks.swap_ab=true", "cells=seq=64"], "the same overrides"),
    (["sets=x: | y: blocks.swap_ab=true", "b=blocks.swap_ab=true", "cells=seq=64"], "not both"),
    (["sets=x: | y: blocks.swap_ab=true", "field=split_masked", "cells=seq=64"], "not both"),
])
def test_bad_arguments_are_one_line(args, message):
    run = run_ab(*args)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr


def test_a_sweep_key_is_swept_as_it_is_and_read_from_its_column(tmp_path):
    """field= a top-level sweep key (conf/config.yaml's, e.g. forward): the override is FIELD=A,B (pass b B,A) and
    a row's value is its column of that name; any other field is a block field (blocks.FIELD, block_overrides_json)."""
    from runners import ab
    args = {**ab.DEFAULTS, "variant": "ws", "field": "forward", "extra": "isolate=false timed=forward"}
    values = ("gluon.pp3", "gluon.pp3_lpt")
    argv = ab.sweep_argv("seq=1024 head_dim=64", args, values, "a", tmp_path)
    assert "forward=gluon.pp3,gluon.pp3_lpt" in argv and "timed=forward" in argv
    assert not any(arg.startswith("blocks.") for arg in argv)
    assert "forward=gluon.pp3_lpt,gluon.pp3" in ab.sweep_argv("seq=1024", args, values, "b", tmp_path)
    block = ab.sweep_argv("seq=1024", {**args, "field": "split_masked"}, ("false", "true"), "a", tmp_path)
    assert "blocks.split_masked=false,true" in block
    rows = pd.DataFrame({"forward": list(values), "sink": [True, False],
                         "block_overrides_json": ['{"split_masked": true}', "{}"]})
    assert list(ab.field_values(rows, "forward")) == list(values)
    assert list(ab.field_values(rows, "sink")) == ["true", "false"]
    assert list(ab.field_values(rows, "split_masked")) == ["true", "None"]
