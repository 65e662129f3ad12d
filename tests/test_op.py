"""attention() as the operator torch.ops.flash_bwd.attention (variants/op.py), on the CPU interpreter: the same
outputs and gradients as the design's own autograd.Function, torch.library.opcheck, and torch.compile(fullgraph=True)
of a tiny model (Inductor's CPU backend around the opaque op). The GPU side (every design compiled, CUDA-graph
replay): tests/test_compile_gpu.py."""
import contextlib

import pytest
import torch

from variants import attention, get
from variants.base import TritonVariant, default_scale
from variants.blocks import blocks_from_text, blocks_text
from variants.op import attention_op, through_operator
from variants.registry import registered

from tests.test_variants import small_blocks

INTERPRETED = [name for name in registered() if isinstance(get(name), TritonVariant) and get(name).runs_in_interpreter]
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter tests (GPU: test_compile_gpu.py)")


def qkv(dtype, batch=1, seq=40, heads=2, kv_heads=1, head_dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seq, heads, head_dim, generator=gen).to(dtype)  # [B, N, H, D]
    k = torch.randn(batch, seq, kv_heads, head_dim, generator=gen).to(dtype)  # [B, N, Hkv, D]
    v = torch.randn(batch, seq, kv_heads, head_dim, generator=gen).to(dtype)
    return q, k, v


def grads_of(fn, q, k, v, do):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o = fn(*leaves)
    o.backward(do)
    return (o.detach(), *(t.grad for t in leaves))


@pytest.mark.parametrize("path", ["plan", "operator"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("variant", INTERPRETED)
def test_op_matches_the_design_eagerly(variant, dtype, path):
    """attention() == the design's own autograd.Function (the path before the op), bit for bit: eagerly by its
    launch plan without the op's dispatch (path plan, variants/plan.py), and through the op (path operator, what
    torch.compile traces)."""
    q, k, v = qkv(dtype)
    do = torch.randn_like(q)
    impl = get(variant)
    blocks = small_blocks(variant)

    def direct(q, k, v):
        from variants.problem import Problem
        config = impl.make_blocks(Problem.from_tensors(q, k, v, True), blocks)
        return impl.apply(q, k, v, True, default_scale(q.shape[-1]), config)

    with through_operator() if path == "operator" else contextlib.nullcontext():
        through_op = grads_of(lambda q, k, v: attention(q, k, v, causal=True, variant=variant, blocks=blocks), q, k, v,
                              do)
    for got, want in zip(through_op, grads_of(direct, q, k, v, do)):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_op_packed_matches_the_design():
    cu = torch.tensor([0, 9, 9, 40], dtype=torch.int32)
    q, k, v = (t.squeeze(0) for t in qkv(torch.float32))  # [total, H, D]
    do = torch.randn_like(q)
    impl = get("two_pass")

    def direct(q, k, v):
        from kernels.varlen import Packing
        from variants.problem import Problem
        packing = Packing(cu)
        config = impl.make_blocks(Problem.from_packed(q, k, v, True, packing), small_blocks("two_pass"))
        return impl.apply(q, k, v, True, default_scale(q.shape[-1]), config, varlen=packing)

    through_op = grads_of(lambda q, k, v: attention(q, k, v, causal=True, variant="two_pass", cu_seqlens_q=cu,
                                                    blocks=small_blocks("two_pass")), q, k, v, do)
    for got, want in zip(through_op, grads_of(direct, q, k, v, do)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_op_errors_are_one_line():
    q, k, v = qkv(torch.float32)
    with pytest.raises(ValueError, match="unknown field"):
        attention(q, k, v, variant="two_pass", blocks={"BLOCK_Q": 16})
    with pytest.raises(ValueError, match="unknown variant"):
        attention(q, k, v, variant="nope")
    with pytest.raises(ValueError, match="max_seqlen_q=3 is shorter"):
        attention(q[0], k[0], v[0], variant="two_pass", cu_seqlens_q=torch.tensor([0, 40], dtype=torch.int32),
                  max_seqlen_q=3)


def test_blocks_text_round_trips():
    assert blocks_text(None) == "" and blocks_from_text("") is None
    assert blocks_text({"b": 1, "a": True, "c": "tma"}) == "a=True;b=1;c='tma'"
    assert blocks_from_text(blocks_text({"b": 1, "a": True, "c": "tma"})) == {"a": True, "b": 1, "c": "tma"}
    defaults = get("two_pass").Blocks()
    assert blocks_from_text(blocks_text(defaults)) == defaults.as_dict()


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_opcheck(packed):
    """Schema, fake tensors (shapes and strides against the real op), autograd registration, AOT dispatch."""
    q, k, v = (t.requires_grad_(True) for t in qkv(torch.float32, seq=24))
    cu = None
    if packed:
        q, k, v = (t.detach().squeeze(0).requires_grad_(True) for t in (q, k, v))
        cu = torch.tensor([0, 7, 24], dtype=torch.int32)
    args = (q, k, v, True, default_scale(16), "two_pass", blocks_text(small_blocks("two_pass")), cu, None, None, None)
    torch.library.opcheck(attention_op, args)


class TinyAttention(torch.nn.Module):
    """One causal self-attention block: qkv projection, attention(), output projection."""

    def __init__(self, variant: str, d_model: int = 32, heads: int = 2):
        super().__init__()
        self.variant, self.heads = variant, heads
        self.blocks = small_blocks(variant) if variant in INTERPRETED else None
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.out = torch.nn.Linear(d_model, d_model)

    def forward(self, x):  # x [B, N, d_model]
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, d_model // self.heads).unbind(2)  # [B, N, H, D] each
        o = attention(q, k, v, causal=True, variant=self.variant, blocks=self.blocks)
        return self.out(o.reshape(batch, seq, d_model))


def compiled_step(variant: str, compile_it: bool):
    torch.manual_seed(0)
    model = TinyAttention(variant)
    x = torch.randn(2, 24, 32)
    run = torch.compile(model, fullgraph=True) if compile_it else model
    loss = run(x).square().mean()
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("variant", ["two_pass", "reference"])
def test_compile_fullgraph_on_cpu(variant):
    """Inductor (CPU, C++) compiles the model around the opaque op with fullgraph=True: no graph break; loss and
    parameter gradients match eager."""
    torch._dynamo.reset()
    eager_loss, eager_grads = compiled_step(variant, compile_it=False)
    loss, grads = compiled_step(variant, compile_it=True)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, eager_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_scale_as_a_graph_input(monkeypatch):
    """A scale that is an input of the compiled function (a SymFloat with dynamic=True) reaches the op as a float."""
    monkeypatch.undo()  # conftest's NaN-poisoned torch.empty_like breaks Inductor's dynamic-shape tracing
    q, k, v = qkv(torch.float32, seq=32)
    blocks = {"BLOCK_M1": 16, "BLOCK_N1": 16, "BLOCK_M2": 16, "BLOCK_N2": 16}

    @torch.compile(fullgraph=True, dynamic=True)
    def run(q, k, v, scale):  # the blocks a literal: dynamic=True would make a closure's ints symbolic
        return attention(q, k, v, causal=True, scale=scale, variant="two_pass",
                         blocks={"BLOCK_M1": 16, "BLOCK_N1": 16, "BLOCK_M2": 16, "BLOCK_N2": 16})

    torch._dynamo.reset()
    for scale in (0.1, 0.2):
        torch.testing.assert_close(run(q, k, v, scale), attention(q, k, v, causal=True, scale=scale,
                                                                  variant="two_pass", blocks=blocks))


@pytest.mark.parametrize("path", ["plan", "operator"])
def test_attention_takes_the_forward_choice(path, monkeypatch):
    """attention(..., forward=) reaches the design's forward on both paths (issue 42); on the CPU every choice runs the
    stock forward, so the results are the default's bit for bit. A bad name, or a forward for a baseline, is a one-line
    ValueError."""
    impl, blocks = get("two_pass"), small_blocks("two_pass")
    q, k, v = qkv(torch.float32)
    do = torch.randn_like(q)
    seen = []
    real = type(impl).forward

    def spy(self, *args, **kwargs):
        seen.append(args[9] if len(args) > 9 else kwargs.get("forward"))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(type(impl), "forward", spy)

    def call(forward):
        return lambda q, k, v: attention(q, k, v, causal=True, variant="two_pass", blocks=blocks, forward=forward)
    with through_operator() if path == "operator" else contextlib.nullcontext():
        default = grads_of(call(None), q, k, v, do)
        for forward in ("stock", "sdpa_cudnn"):
            for got, want in zip(grads_of(call(forward), q, k, v, do), default):
                torch.testing.assert_close(got, want, rtol=0, atol=0)
    # the plan path resolves the default itself (its launches are keyed by the forward); the operator passes None
    assert seen == [impl.default_forward if path == "plan" else None, "stock", "sdpa_cudnn"], seen
    with pytest.raises(ValueError, match="forward='fast': one of stock, gluon, auto"):
        attention(q, k, v, variant="two_pass", forward="fast")
    with pytest.raises(ValueError, match="reference is a baseline and runs its own forward"):
        attention(q, k, v, variant="reference", forward="stock")
