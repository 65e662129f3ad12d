"""The per-call host work of a warm eager call, counted (issue 44): scripts/launch_count_cpu.py runs every Triton
design's real launchers on CPU tensors as on an sm90 GPU (plans that bind, stand-in compiled kernels), and this file
pins what one warm forward + backward does: its kernel launches (all bound, none through Triton's path), its
top-level torch ops (allocations, fills, views, copies) and a budget of Python calls. A change that adds a launch,
an allocation, a fill or a re-validation per call fails here, with no timing involved. Counts change on purpose:
update the tables below with the script's output (`python scripts/launch_count_cpu.py`)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = "1,256,2,64"  # B, N, H, D (bf16 causal): issue 44's smaller done-when shape; counts do not depend on it

FORWARD = ["_fwd_kernel", "_delta_kernel"]  # the forward, then the backward's delta
LAUNCHES = {
    "two_pass": FORWARD + ["_dkdv_kernel", "_dq_kernel"],
    "ws_two_pass": FORWARD + ["_ws_backward_kernel", "_ws_dq_kernel"],
    "ws": FORWARD + ["_ws_backward_kernel", "_dq_finish_kernel"],
    "fused": FORWARD + ["_fused_kernel"],
    "atomic": FORWARD + ["_dkdv_kernel", "_scale_cast_kernel"],
    "atomic_tma": FORWARD + ["_atomic_tma_kernel", "_dq_finish_kernel"],
}
RESULTS = {"aten::empty": 2, "aten::empty_like": 4}  # o, lse; delta and dq, dk, dv (or the forward's o and lse ...)
ACCUMULATOR = "an fp32 dQ accumulator, allocated empty: the delta launch zeroes it (no fill, no zeros)"
OPS = {  # top-level aten ops of one warm call (torch.profiler): no fill, copy, view or arithmetic of ATen's
    "two_pass": RESULTS,
    "ws_two_pass": RESULTS,  # its dK/dV kernel's never-touched dQ placeholder is made once per device
    "ws": {"aten::empty": 4, "aten::empty_like": 3},  # + ACCUMULATOR; dq by empty; dq_finish takes it without a view
    "fused": RESULTS,
    "atomic": {"aten::empty": 2, "aten::empty_like": 5},  # + ACCUMULATOR (like q); one scale-and-cast launch
    "atomic_tma": {"aten::empty": 3, "aten::empty_like": 4},  # + ACCUMULATOR
}
PY_CALLS = {  # Python calls per warm call (cProfile), measured + about 10 %: a re-validation costs far more. With the
    # phases' memos (kernels.launch.memo): two_pass 316, ws_two_pass 304, ws 288, fused 270, atomic 299, atomic_tma 286
    "two_pass": 350, "ws_two_pass": 335, "ws": 320, "fused": 300, "atomic": 330, "atomic_tma": 315,
}


@pytest.fixture(scope="module")
def counts():
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "launch_count_cpu.py"), "--json",
                          ",".join(LAUNCHES), SHAPE], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_triton_design_is_counted():
    from variants import get
    from variants.base import TritonVariant
    from variants.registry import registered
    designs = {name for name in registered() if isinstance(get(name), TritonVariant) and get(name).as_operator}
    assert designs == set(LAUNCHES), "a new design: add its counts here (python scripts/launch_count_cpu.py)"


@pytest.mark.parametrize("design", list(LAUNCHES))
def test_a_warm_call_does_no_more_than_before(counts, design):
    got = counts[f"{design} {SHAPE}"]
    assert got["plan_builds"] == 0 and got["jit_launches"] == 0, "a warm call re-planned or left the bound path"
    assert got["launched"] == LAUNCHES[design]
    assert got["ops"] == OPS[design]
    assert got["py_calls"] <= PY_CALLS[design], f"{got['py_calls']} Python calls per warm call"
