"""Bound launches (kernels/launch.py, issue 44) on a GPU: after a signature's first eager call, every design's
launches go through the compiled kernels' launchers, and the gradients stay those of the operator's path (Triton's
launches): bit for bit where the design is deterministic, within the dtype's tolerance where it adds by atomics."""
import pytest
import torch

from kernels.launch import stats
from variants import attention, get
from variants.op import through_operator
from variants.plan import plans
from variants.problem import Problem

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (bound launches need compiled kernels)")


@pytest.fixture(autouse=True)
def bound_launches_on(monkeypatch):
    import kernels.launch
    monkeypatch.setattr(kernels.launch, "ENABLED", True)  # the default; also under FLASH_BWD_BOUND_LAUNCHES=0

DESIGNS = ["two_pass", "ws_two_pass", "ws", "atomic", "fused", "atomic_tma"]
DETERMINISTIC = {"two_pass", "ws_two_pass"}


def _inputs(seq, heads, head_dim, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(1, seq, heads, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for _ in range(4))
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), do


def _call(variant, q, k, v, do):
    o = attention(q, k, v, causal=True, variant=variant)
    return (o.detach(), *torch.autograd.grad(o, (q, k, v), do))


@pytest.mark.parametrize("variant", DESIGNS)
@pytest.mark.parametrize("seq,heads,head_dim", [(256, 2, 64), (1024, 4, 128), (200, 2, 96)],
                         ids=["N256-H2-D64", "N1024-H4-D128", "N200-H2-D96"])
def test_warm_calls_are_bound_and_match_the_operator_path(variant, seq, heads, head_dim):
    reason = get(variant).supports(Problem(1, seq, seq, heads, heads, head_dim, True, torch.bfloat16, "cuda"))
    if reason:
        pytest.skip(reason)
    q, k, v, do = _inputs(seq, heads, head_dim)
    with through_operator():
        want = _call(variant, q, k, v, do)
    plans.clear()
    stats.reset()
    _call(variant, q, k, v, do)  # records and binds
    first = stats.jit
    assert first > 0 and stats.binds == first and stats.bound == 0
    for _ in range(2):
        got = _call(variant, q, k, v, do)
        torch.cuda.synchronize()
        for a, b in zip(got, want):
            if variant in DETERMINISTIC:
                assert torch.equal(a, b)
            else:
                torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)
    assert stats.bound == 2 * first and stats.jit == first and plans.builds == 1
