"""ws_two_pass (Gluon, sm90): ws's main kernel without dQ plus a dQ kernel of its own. Compiled for sm90 on any
machine (CPU: Triton's bundled ptxas); on an sm90 GPU checked against the fp32 reference and for bitwise-equal
gradients across runs; refused with a reason everywhere else."""
import pytest
import torch

from tests.test_variants import make_inputs, run_and_check
from tests.test_ws import MAX_SMEM, ON_HOPPER, compiled_rows
from variants import attention, get
from variants.problem import Problem
from variants.ws_two_pass import WsTwoPassBlocks

KERNELS = ["_ws_backward_kernel", "_ws_dq_kernel"]
COMPILE_CASES = [(64, False), (64, True), (128, False), (128, True)]


@pytest.mark.parametrize("head_dim, causal", COMPILE_CASES,
                         ids=[f"D{d}-{'causal' if c else 'full'}" for d, c in COMPILE_CASES])
def test_both_kernels_compile_for_sm90_without_spills(head_dim, causal):
    rows = compiled_rows(head_dim, causal, variant="ws_two_pass", kernels=KERNELS)
    assert sorted(row["kernel"] for row in rows) == sorted(KERNELS), rows
    for row in rows:
        assert row["status"] == "ok", row["status"]
        assert row["smem_bytes"] <= MAX_SMEM and row["programs_per_sm"] >= 1, row
        if row["kernel"] == "_ws_dq_kernel" or head_dim == 64:
            assert row["spill_store_bytes"] == 0, row
        else:  # D=128 causal: the dK/dV kernel's masked path spills a few bytes, as ws's does
            assert row["spill_store_bytes"] <= 64, row


@pytest.mark.parametrize("fields, rule", [
    (dict(num_warps2=2), "num_warps2=2"), (dict(BLOCK_M2=64, num_warps2=8), "multiple of 16 x num_warps2"),
    (dict(BLOCK_N=64, num_warps=8), "multiple of 16 x num_warps"), (dict(num_stages2=1), "num_stages")])
def test_bad_blocks_name_the_rule(fields, rule):
    with pytest.raises(ValueError, match=rule):
        WsTwoPassBlocks.from_dict(fields)


@pytest.mark.skipif(ON_HOPPER, reason="on an sm90 GPU ws_two_pass runs")
def test_refused_with_a_reason_off_hopper():
    problem = Problem(1, 128, 128, 2, 2, 64, False, torch.float16, "cuda" if torch.cuda.is_available() else "cpu")
    reason = get("ws_two_pass").supports(problem)
    assert reason and ("sm90" in reason or "Gluon" in reason), reason


SHAPES = [(2, 300, 300, 4, 2, 64), (1, 77, 150, 2, 1, 128), (2, 257, 129, 4, 4, 128), (1, 512, 512, 2, 2, 64)]


@pytest.mark.skipif(not ON_HOPPER, reason="ws_two_pass needs an sm90 GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_matches_reference_on_hopper(shape, causal, dtype):
    run_and_check("ws_two_pass", *make_inputs(shape, dtype, "cuda"), causal)


BLOCKS = [dict(swap_ab=False, BLOCK_M=128), dict(BLOCK_M2=64, num_warps2=4), dict(BLOCK_N2=128),
          dict(num_stages=3, num_stages2=3), dict(persistent=True), dict(BLOCK_N=64, num_warps=4),
          dict(split_masked=True), dict(split_masked=True, persistent=True, swap_ab=False, BLOCK_M=64)]


@pytest.mark.skipif(not ON_HOPPER, reason="ws_two_pass needs an sm90 GPU")
@pytest.mark.parametrize("blocks", BLOCKS, ids=["mn-m128", "dq-m64-w4", "dq-n128", "stages3", "persistent", "w4-n64",
                                                "split-masked", "split-masked-persistent-mn"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_tiles_match_reference_on_hopper(blocks, head_dim):
    if head_dim == 128 and blocks.get("BLOCK_M") == 128:
        pytest.skip("128 x 128 tiles without swap AB need more shared memory than an SM has at D=128")
    run_and_check("ws_two_pass", *make_inputs((2, 300, 333, 4, 2, head_dim), torch.bfloat16, "cuda"), True,
                  blocks=blocks)


@pytest.mark.skipif(not ON_HOPPER, reason="ws_two_pass needs an sm90 GPU")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradients_are_bitwise_equal_across_runs_on_hopper(causal):
    """No atomics anywhere: the same inputs give the same bits (ws's dQ reduce-adds do not promise that)."""
    q, k, v, do = make_inputs((2, 1024, 1024, 8, 2, 128), torch.bfloat16, "cuda")
    runs = []
    for _ in range(3):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        attention(*leaves, causal=causal, variant="ws_two_pass").backward(do)
        runs.append([t.grad for t in leaves])
    for other in runs[1:]:
        for name, a, b in zip(("dq", "dk", "dv"), runs[0], other):
            assert torch.equal(a, b), name
