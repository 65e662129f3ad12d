"""scripts/ptx_fingerprint.py: PTX hashes per kernel for a refactor's before / after (docs/compile_check.md)."""
import json
import os
import subprocess
import sys

from runners.point import env

SCRIPT = str(env.REPO / "scripts" / "ptx_fingerprint.py")


def run(*args):
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # it compiles, never interprets
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=environment,
                          timeout=600)


def test_fingerprints_every_kernel_of_a_case_and_compare_finds_a_change(tmp_path):
    out = tmp_path / "a.json"
    done = run("--variants", "two_pass", "--cases", "d64", "--jobs", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    prints = json.loads(out.read_text())
    assert {key.rsplit("/", 1)[1] for key in prints} == {"_fwd_kernel#0", "_delta_kernel#0", "_dkdv_kernel#0",
                                                         "_dq_kernel#0"}
    assert all(not value.startswith("error") for value in prints.values()), prints
    same = run("--compare", str(out), str(out))
    assert same.returncode == 0 and "0 differ" in same.stdout
    changed = dict(prints, **{"two_pass/d64/default/_dq_kernel#0": "0000 1 lines"})
    (tmp_path / "b.json").write_text(json.dumps(changed))
    differ = run("--compare", str(out), str(tmp_path / "b.json"))
    assert differ.returncode == 1 and "1 differ" in differ.stdout
    assert "two_pass/d64/default/_dq_kernel#0" in differ.stdout


def test_normalized_ptx_keeps_instructions_and_drops_debug_lines():
    sys.path.insert(0, str(env.REPO / "scripts"))
    from ptx_fingerprint import normalized
    ptx = (".loc 1 20 5\n$L__tmp3:\n\tadd.s32 \t%r1, %r2, 1;\n$L__BB0_2:\n"
           "\t.file 1 \"x.py\"\n\t.section\t.debug_info\n{}")
    assert normalized(ptx) == "\tadd.s32 \t%r1, %r2, 1;\n$L__BB0_2:"
