"""attention() under torch.compile on a GPU, every Triton design (stock Triton and Gluon) from the registry: a model
compiles with fullgraph=True, its loss and gradients match eager, and a CUDA-graph replay (mode="reduce-overhead")
gives the same training step. The CPU side (eager op, opcheck, Inductor's CPU backend): tests/test_op.py."""
import pytest
import torch

from variants import attention, get
from variants.base import TritonVariant, default_scale
from variants.op import attention_op
from variants.problem import Problem
from variants.registry import registered

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch.compile of the Triton "
                                "designs and CUDA graphs); the CPU tests of the op are tests/test_op.py")

DESIGNS = [name for name in registered() if isinstance(get(name), TritonVariant)]
BATCH, SEQ, HEADS, KV_HEADS, HEAD_DIM, D_MODEL = 2, 256, 4, 2, 64, 128


class Model(torch.nn.Module):
    """Two causal GQA attention blocks with projections, fp32 parameters, run under fp16 autocast."""

    def __init__(self, variant: str):
        super().__init__()
        self.variant = variant
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(D_MODEL, (HEADS + 2 * KV_HEADS) * HEAD_DIM) for _ in range(2))
        self.out = torch.nn.ModuleList(torch.nn.Linear(HEADS * HEAD_DIM, D_MODEL) for _ in range(2))

    def forward(self, x):  # x [B, N, d_model]
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(x).view(BATCH, SEQ, HEADS + 2 * KV_HEADS, HEAD_DIM).split([HEADS, KV_HEADS, KV_HEADS], 2)
            o = attention(q, k, v, causal=True, variant=self.variant)  # [B, N, H, D]
            x = x + out(o.reshape(BATCH, SEQ, HEADS * HEAD_DIM))
        return x


def skip_unsupported(variant: str) -> None:
    problem = Problem(BATCH, SEQ, SEQ, HEADS, KV_HEADS, HEAD_DIM, True, torch.float16, "cuda")
    reason = get(variant).supports(problem)
    if reason is not None:
        pytest.skip(reason)


def step(run, model, x):
    """One training step's loss and parameter gradients (no optimizer: the gradients are the step)."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = run(x).float().square().mean()
    loss.backward()
    return loss.detach().clone(), [p.grad.clone() for p in model.parameters()]


def assert_close_rel(got, want, tol=2e-2):
    error = (got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-12)
    assert error <= tol, f"relative error {error:.3g} > {tol}"


def fresh(variant: str):
    torch.manual_seed(0)
    return Model(variant).cuda(), torch.randn(BATCH, SEQ, D_MODEL, device="cuda")


@pytest.mark.parametrize("variant", DESIGNS)
def test_fullgraph_compile_matches_eager(variant):
    skip_unsupported(variant)
    torch._dynamo.reset()
    model, x = fresh(variant)
    eager_loss, eager_grads = step(model, model, x)
    compiled = torch.compile(model, fullgraph=True)
    loss, grads = step(compiled, model, x)
    assert_close_rel(loss, eager_loss)
    for got, want in zip(grads, eager_grads):
        assert_close_rel(got, want)


@pytest.mark.parametrize("variant", DESIGNS)
def test_cuda_graph_replay_gives_the_same_step(variant):
    """mode="reduce-overhead": the first calls record the graph, later ones replay it; every replayed step equals
    the eager step on the same inputs, and Inductor skipped no CUDA graph."""
    from torch._dynamo.utils import counters
    skip_unsupported(variant)
    torch._dynamo.reset()
    counters.clear()
    model, x = fresh(variant)
    eager_loss, eager_grads = step(model, model, x)
    compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    for _ in range(4):  # warm-up, record, replays
        torch.compiler.cudagraph_mark_step_begin()
        loss, grads = step(compiled, model, x)
        assert_close_rel(loss, eager_loss)
        for got, want in zip(grads, eager_grads):
            assert_close_rel(got, want)
    assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])


@pytest.mark.parametrize("variant", DESIGNS)
def test_opcheck_on_gpu(variant):
    skip_unsupported(variant)
    q = torch.randn(BATCH, SEQ, HEADS, HEAD_DIM, device="cuda", dtype=torch.float16, requires_grad=True)  # [B, N, H, D]
    k, v = (torch.randn(BATCH, SEQ, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.float16, requires_grad=True)
            for _ in range(2))  # [B, N, Hkv, D]
    torch.library.opcheck(attention_op, (q, k, v, True, default_scale(HEAD_DIM), variant, "", None, None, None, None))


def test_fp64_scale_from_a_compiled_caller():
    """A scale that is a graph input (a SymFloat under dynamic floats) reaches the kernels and trains as a constant
    scale does: issue 27's `b_m ... fp64` cannot come back."""
    skip_unsupported("two_pass")
    q, k, v = (torch.randn(1, SEQ, 2, HEAD_DIM, device="cuda", dtype=torch.float16) for _ in range(3))

    @torch.compile(fullgraph=True, dynamic=True)
    def run(q, k, v, scale):
        return attention(q, k, v, causal=True, scale=scale, variant="two_pass")

    want = attention(q, k, v, causal=True, scale=0.1, variant="two_pass")
    torch.testing.assert_close(run(q, k, v, 0.1), want)
