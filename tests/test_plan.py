"""Launch plans (variants/plan.py, issue 44) on the CPU interpreter: an eager call's checks and block resolution run on
its signature's first call only, a new signature gets a new plan, the cache is bounded, the eager path (no operator
dispatch) gives the operator's bits and the reference's gradients, and a call that something traces still goes
through the operator."""
import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from variants import attention
from variants.accuracy import REL_TOL, error
from variants.base import TritonVariant, Variant
from variants.op import through_operator
from variants.plan import PlanCache, plans
from variants.problem import Problem
from variants.reference import reference_grads

from tests.test_variants import small_blocks

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter tests")
BLOCKS = small_blocks("two_pass")


def qkv(dtype=torch.float32, batch=1, seq_q=24, seq_k=24, heads=2, kv_heads=1, head_dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seq_q, heads, head_dim, generator=gen).to(dtype)  # [B, Nq, H, D]
    k = torch.randn(batch, seq_k, kv_heads, head_dim, generator=gen).to(dtype)  # [B, Nk, Hkv, D]
    v = torch.randn(batch, seq_k, kv_heads, head_dim, generator=gen).to(dtype)
    return q, k, v


def step(q, k, v, causal=True, do=None, blocks=BLOCKS, **kwargs):
    """One eager forward + backward (do: ones if None) -> (o, dq, dk, dv)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o = attention(*leaves, causal=causal, variant="two_pass", blocks=blocks, **kwargs)
    o.backward(torch.ones_like(o) if do is None else do)
    return (o.detach(), *(t.grad for t in leaves))


@pytest.fixture
def counted(monkeypatch):
    """Calls of the per-call work a plan replaces: Problem.from_tensors, Variant.make_blocks and
    TritonVariant.default_blocks."""
    calls = {"from_tensors": 0, "make_blocks": 0, "default_blocks": 0}
    real_from_tensors = Problem.from_tensors.__func__
    real_make_blocks, real_default_blocks = Variant.make_blocks, TritonVariant.default_blocks

    def from_tensors(cls, *args, **kwargs):
        calls["from_tensors"] += 1
        return real_from_tensors(cls, *args, **kwargs)

    def make_blocks(self, *args, **kwargs):
        calls["make_blocks"] += 1
        return real_make_blocks(self, *args, **kwargs)

    def default_blocks(self, *args, **kwargs):
        calls["default_blocks"] += 1
        return real_default_blocks(self, *args, **kwargs)

    monkeypatch.setattr(Problem, "from_tensors", classmethod(from_tensors))
    monkeypatch.setattr(Variant, "make_blocks", make_blocks)
    monkeypatch.setattr(TritonVariant, "default_blocks", default_blocks)
    return calls


@pytest.mark.parametrize("path", ["eager", "operator"])
def test_second_call_revalidates_nothing(counted, path):
    """The first call of a signature builds one plan (one from_tensors, one make_blocks, one default-table lookup,
    for the forward and the backward together; before plans an eager call ran from_tensors three times and
    make_blocks twice); the second call builds none and calls none of them. Through the operator (what
    torch.compile traces), attention() still checks the problem in Python on every call (one from_tensors, the
    one-line errors before dispatch), and the operator's forward and backward share the signature's plan."""
    q, k, v = qkv()
    own_checks = 1 if path == "operator" else 0  # attention()'s traced check, per call
    with through_operator() if path == "operator" else contextlib.nullcontext():
        step(q, k, v)
        assert plans.builds == 1
        assert counted == {"from_tensors": 1 + own_checks, "make_blocks": 1, "default_blocks": 1}
        hits = plans.hits
        step(q, k, v)
    assert plans.builds == 1
    assert counted == {"from_tensors": 1 + 2 * own_checks, "make_blocks": 1, "default_blocks": 1}
    assert plans.hits == hits + (1 if path == "eager" else 2)  # the operator looks it up in forward and backward


def test_a_new_signature_gets_a_new_plan():
    """Shape, dtype, causal, block overrides, strides (the bhnd layout's views) and a score modifier each make a
    signature of their own; calling them all again builds nothing."""
    q, k, v = qkv()
    calls = [
        lambda: step(q, k, v),
        lambda: step(*qkv(seq_q=17, seq_k=9)),
        lambda: step(q.half(), k.half(), v.half()),
        lambda: step(q, k, v, causal=False),
        lambda: step(q, k, v, blocks={**BLOCKS, "BLOCK_M2": 16}),
        lambda: step(*(t.transpose(1, 2).contiguous() for t in (q, k, v)), layout="bhnd"),
        lambda: step(q, k, v, softcap=5.0),
    ]
    for built, call in enumerate(calls, 1):
        call()
        assert plans.builds == built
    for call in calls:
        call()
    assert plans.builds == len(calls) and len(plans) == len(calls)


def test_the_cache_is_bounded():
    """The least recently used plan goes first once `size` plans are held; it is built again when called."""
    from variants import get
    cache, impl = PlanCache(size=2), get("two_pass")
    shapes = [qkv(seq_q=n, seq_k=n) for n in (16, 20, 24)]
    for q, k, v in shapes:
        cache.dense(impl, q, k, v, True, "")
    assert len(cache) == 2 and cache.builds == 3
    cache.dense(impl, *shapes[2], True, "")  # still held
    assert cache.builds == 3
    cache.dense(impl, *shapes[0], True, "")  # evicted: built again
    assert cache.builds == 4 and len(cache) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("shape", [(2, 37, 23, 4, 2, 24), (1, 19, 40, 3, 1, 8)],
                         ids=["B2-Nq37-Nk23-H4-HKV2-D24", "B1-Nq19-Nk40-H3-HKV1-D8"])
def test_planned_calls_match_the_reference(shape, causal, dtype):
    """The first (planning) and the second (planned) eager call give the reference's o, dq, dk, dv within the
    dtype's tolerance, and the operator's path the same bits."""
    batch, seq_q, seq_k, heads, kv_heads, head_dim = shape
    q, k, v = qkv(dtype, batch, seq_q, seq_k, heads, kv_heads, head_dim)
    do = torch.randn_like(q)
    want = reference_grads(q, k, v, do, causal)
    first, second = step(q, k, v, causal, do=do), step(q, k, v, causal, do=do)
    assert plans.builds == 1
    for got_first, got_second, ref in zip(first, second, want):
        assert got_first.dtype == dtype and got_first.shape == ref.shape
        torch.testing.assert_close(got_second, got_first, rtol=0, atol=0)
        assert error(got_second, ref).ok(dtype), (error(got_second, ref), REL_TOL[dtype])
    with through_operator():
        for got, want_bits in zip(step(q, k, v, causal, do=do), second):
            torch.testing.assert_close(got, want_bits, rtol=0, atol=0)


def test_the_forget_gate_on_the_eager_path():
    """g's gradient comes back through the planned path too (the gate's shape, dtype and device are checked once)."""
    q, k, v = qkv(seq_q=21, seq_k=21)
    g = -torch.rand(1, 21, 2, generator=torch.Generator().manual_seed(1))  # [B, Nq, H] log forget gate
    do = torch.randn_like(q)
    want = reference_grads(q, k, v, do, True, g=g)
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, g)]
        o = attention(*leaves[:3], causal=True, variant="two_pass", blocks=BLOCKS, g=leaves[3])
        o.backward(do)
        for got, ref in zip((o, *(t.grad for t in leaves)), want):
            assert error(got.detach(), ref).ok(torch.float32)
    assert plans.builds == 1
    with pytest.raises(ValueError, match="forget gate g must be fp32"):
        attention(q, k, v, causal=True, variant="two_pass", blocks=BLOCKS, g=g.double())


def test_errors_stay_one_line_and_are_not_cached():
    """A call that fails its checks raises the same one-line ValueError on every call: nothing is planned for it."""
    q, k, v = qkv()
    for _ in range(2):
        with pytest.raises(ValueError, match="BLOCK_M1=48: must be a power of two"):
            attention(q, k, v, variant="two_pass", blocks={"BLOCK_M1": 48})
        with pytest.raises(ValueError, match="heads .3. must be a multiple of kv_heads .2."):
            attention(qkv(heads=3)[0], *qkv(kv_heads=2)[1:], variant="two_pass")
    assert plans.builds == 0 and len(plans) == 0


class _OpsSeen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_sees_the_operator():
    """Under a dispatch mode (what tracing installs) attention() calls torch.ops.flash_bwd.attention, as before
    plans; without one it does not."""
    q, k, v = qkv()
    with _OpsSeen() as mode:
        attention(q, k, v, causal=True, variant="two_pass", blocks=BLOCKS)
    assert any(op.startswith("flash_bwd.attention") for op in mode.ops), sorted(mode.ops)
    from variants import op
    assert op.eager_direct(q, k, v, None)
    assert not op.eager_direct(torch.nn.Parameter(q), k, v, None)  # a tensor subclass: the operator
    with through_operator():
        assert not op.eager_direct(q, k, v, None)
