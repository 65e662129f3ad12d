"""Issue 47 for the flex baseline: V of its own head dim and the learnable sink through flex's LSE
(o * sigmoid(lse - sink), variants/flex.py with_sink), against the fp32 reference with autograd's dsink.

Compiled flex runs on CUDA only and torch refuses flex's backward on a CPU tensor (`_validate_device`); its eager
path underneath (the dense math of the higher-order op) does run there, so these tests lift that check and run the
baseline's own wrapping code (function, varlen_function, modified_flex) eagerly: the LSE's units, its gradient into
dq / dk and dsink are checked here, the compiled kernels on a GPU (tests/test_variants.py's baseline matrix)."""
import pytest
import torch

from tests.test_mla_sinks import make_case
from variants import get
from variants.problem import Modifiers, Problem
from variants.reference import reference_grads

flex_api = pytest.importorskip("torch.nn.attention.flex_attention")


@pytest.fixture
def eager_flex(monkeypatch):
    """variants.flex with eager flex_attention, its CPU backward let through."""
    import variants.flex as flex
    monkeypatch.setattr(flex_api, "_validate_device", lambda *tensors: None)
    monkeypatch.setattr(flex, "_compiled_flex", lambda: flex_api.flex_attention)
    return get("flex")


def grads_of(variant, q, k, v, do, causal, scale, sink, **extra):
    """Baseline.prepare's closure: (dq, dk, dv[, dg], dsink) by autograd through the baseline's function."""
    return variant.prepare(q, k, v, do, causal, scale, variant.Blocks(), sink=sink, **extra)()


def assert_close(got, want, names):
    assert len(got) == len(want) == len(names)
    for name, a, b in zip(names, got, want):
        assert a.shape == b.shape, name
        rel = ((a.double() - b.double()).norm() / b.double().norm()).item()
        assert rel < 1e-5, f"{name}: rel {rel:.3g}"


@pytest.mark.parametrize("nq, nk, h, hkv, causal", [(37, 37, 4, 2, True), (45, 29, 2, 2, True), (23, 41, 2, 1, False)],
                         ids=["gqa-causal", "no-key-rows", "mqa-full"])
def test_dense_with_a_sink_and_dv(eager_flex, nq, nk, h, hkv, causal):
    q, k, v, do, sink = make_case(1, nq, nk, h, hkv, 32, 16)
    got = grads_of(eager_flex, q, k, v, do, causal, 0.2, sink)
    want = reference_grads(q, k, v, do, causal, 0.2, sink=sink)[1:]
    assert_close(got, want, ["dq", "dk", "dv", "dsink"])
    assert want[3].abs().min() > 1e-3  # the sink really has a share of the rows (not a vacuous check)


def test_without_the_sink_the_sink_gradient_is_wrong(eager_flex):
    """The gate can fail: flex without the sink's rescale differs from the reference with one."""
    q, k, v, do, sink = make_case(1, 24, 24, 2, 2, 16, 16)
    plain = grads_of(eager_flex, q, k, v, do, True, 0.25, None)
    want = reference_grads(q, k, v, do, True, 0.25, sink=sink)[1:4]
    with pytest.raises(AssertionError, match="rel"):
        assert_close(plain, want, ["dq", "dk", "dv"])


def test_packed_with_a_sink(eager_flex):
    from kernels.varlen import Packing
    q, k, v, do, sink = (t[0] if t.dim() == 4 else t for t in make_case(1, 50, 50, 4, 2, 32, 16))
    cu = torch.tensor([0, 7, 30, 50], dtype=torch.int32)
    got = grads_of(eager_flex, q, k, v, do, True, 0.2, sink, varlen=Packing(cu, cu, total_q=50, total_k=50))
    want = reference_grads(q, k, v, do, True, 0.2, cu_seqlens_q=cu, cu_seqlens_k=cu, sink=sink)[1:]
    assert_close(got, want, ["dq", "dk", "dv", "dsink"])


def test_modifiers_with_a_sink(eager_flex):
    """softcap and a window (modified_flex's path) with the sink."""
    q, k, v, do, sink = make_case(2, 33, 33, 2, 1, 32, 16)
    mods = Modifiers(7, 0, 5.0)
    got = grads_of(eager_flex, q, k, v, do, True, 0.2, sink, mods=mods)
    want = reference_grads(q, k, v, do, True, 0.2, window_size=(7, 0), softcap=5.0, sink=sink)[1:]
    assert_close(got, want, ["dq", "dk", "dv", "dsink"])


def test_supports_says_which_head_dims():
    flex = get("flex")
    assert flex.supports(Problem(1, 64, 64, 2, 2, 128, True, torch.bfloat16, "cuda", sink=True)) is None
    assert flex.supports(Problem(1, 64, 64, 2, 2, 128, False, torch.bfloat16, "cuda", head_dim_v=64)) is None
    mla = flex.supports(Problem(1, 64, 64, 2, 2, 192, False, torch.bfloat16, "cuda", head_dim_v=128))
    assert mla == "FlexAttention needs a power-of-two head dim >= 16, got 192"
    odd_v = flex.supports(Problem(1, 64, 64, 2, 2, 128, False, torch.bfloat16, "cuda", head_dim_v=48))
    assert odd_v == "FlexAttention needs a power-of-two value head dim >= 16, got 48"
