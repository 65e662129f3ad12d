"""variants/fa4_op.py: FA4's forward / backward as an opaque operator pair under torch.compile (fullgraph), wired to
a stand-in for FA4's private entry points (the fp64 reference) so that the CPU checks the fakes, the autograd join and
the compiled path; the real FA4 runs on a GPU (scripts/gpu_model_step.sh's compiled fa4 rows)."""
import types

import pytest
import torch

from variants.reference import reference_forward, reference_grads

fa4_op = pytest.importorskip("variants.fa4_op")


def _stand_in():
    """_flash_attn_fwd / _flash_attn_bwd of the fp64 reference (dense, no window; the LSE only shaped)."""
    def forward(q, k, v, softmax_scale, causal, return_lse, **_):
        o = reference_forward(q, k, v, causal, softmax_scale, torch.float64).to(q.dtype).contiguous()
        return o, q.new_zeros((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)  # lse [B, H, Nq]

    def backward(q, k, v, o, do, lse, softmax_scale, causal, softcap, **_):
        # by hand: an op's body runs below autograd (P = softmax(S), dS = P (dP - rowsum(dO O)))
        group = q.shape[2] // k.shape[2]
        q64, k64, v64, do64 = (t.double().transpose(1, 2) for t in (q, k, v, do))  # [B, H*, N, D]
        k64, v64 = (t.repeat_interleave(group, dim=1) for t in (k64, v64))
        s = q64 @ k64.transpose(-1, -2) * softmax_scale
        if causal:  # bottom-right aligned
            s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1 + k.shape[1] - q.shape[1]), float("-inf"))
        p = torch.softmax(s, dim=-1)
        dp = do64 @ v64.transpose(-1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        dq = ds @ k64 * softmax_scale
        dk, dv = ds.transpose(-1, -2) @ q64 * softmax_scale, p.transpose(-1, -2) @ do64  # [B, H, Nk, D]
        dk, dv = (t.unflatten(1, (k.shape[2], group)).sum(2) for t in (dk, dv))  # GQA: each kv head's group
        return tuple(grad.transpose(1, 2).to(t.dtype) for grad, t in zip((dq, dk, dv), (q, k, v)))

    return types.SimpleNamespace(_flash_attn_fwd=forward, _flash_attn_bwd=backward)


@pytest.mark.parametrize("causal", [False, True])
def test_the_pair_compiles_fullgraph_and_matches_the_reference(monkeypatch, causal):
    monkeypatch.setattr(fa4_op, "_interface", _stand_in)
    torch.manual_seed(0)
    q = torch.randn(2, 37, 4, 16, dtype=torch.float32, requires_grad=True)  # [B, N, H, D], GQA 4 / 2
    k, v = (torch.randn(2, 41, 2, 16, dtype=torch.float32, requires_grad=True) for _ in range(2))
    do = torch.randn(2, 37, 4, 16)

    def step(q, k, v):
        return fa4_op.fa4_attention(q, k, v, causal, 0.25)[0]

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    o = compiled(q, k, v)
    grads = torch.autograd.grad(o, (q, k, v), do)
    expected, *expected_grads = reference_grads(q, k, v, do, causal, 0.25, torch.float64)
    torch.testing.assert_close(o.double(), expected, atol=1e-5, rtol=1e-5)
    for grad, want in zip(grads, expected_grads):
        torch.testing.assert_close(grad.double(), want, atol=1e-5, rtol=1e-5)


def test_the_baseline_takes_the_pair_only_while_compiling(monkeypatch):
    from variants import get
    calls = []
    monkeypatch.setattr(fa4_op, "_interface", lambda: (calls.append("op"), _stand_in())[1])
    q = torch.randn(1, 8, 2, 16, requires_grad=True)
    fa4 = get("fa4")
    compiled = torch.compile(lambda q: fa4.function(q, q, q, True, 0.25), fullgraph=True, backend="aot_eager")
    compiled(q).sum().backward()
    assert calls == ["op", "op"] and q.grad is not None  # forward, then backward, through the stand-in
